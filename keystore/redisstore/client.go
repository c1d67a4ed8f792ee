package redisstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// DefaultTimeout is [ClientOptions.Timeout] when it is zero.
const DefaultTimeout = 500 * time.Millisecond

// ClientOptions describe how to reach Redis; they mirror the `store.redis`
// config section. The topology follows from them: MasterName set → Sentinel
// (Addrs are the sentinels); several Addrs or ClusterMode → Cluster (Addrs
// are seed nodes); else one standalone server.
type ClientOptions struct {
	// Addrs are host:port addresses. Required.
	Addrs []string
	// MasterName selects Sentinel: the name of the monitored master.
	MasterName string
	// ClusterMode selects Cluster even with a single seed address (a
	// Cluster behind one configuration endpoint).
	ClusterMode bool
	// Username and Password authenticate to Redis (ACL user, or the
	// requirepass password with an empty Username).
	Username string
	Password string
	// SentinelUsername and SentinelPassword authenticate to the sentinels,
	// when they require it.
	SentinelUsername string
	SentinelPassword string
	// DB is the database number. Must be 0 with Cluster.
	DB int
	// TLS, when not nil, is used for every connection (sentinels included).
	TLS *tls.Config
	// Timeout bounds each dial, read, write and wait for a pooled
	// connection. Default [DefaultTimeout]. Ignored when LiveTimeout is set.
	Timeout time.Duration
	// LiveTimeout, when not nil, is read by each call in place of Timeout,
	// so that a reload can change it while the client runs (see
	// [Timeout]).
	LiveTimeout *Timeout
	// PoolSize is the most connections per node. Default go-redis's
	// (10 × GOMAXPROCS).
	PoolSize int
}

// NewClient returns a go-redis client for opts. The caller owns it and must
// Close it after every store using it is closed.
//
// Every go-redis default that could stretch a call beyond Timeout is set
// explicitly (go-redis changed several in v9.15 and v9.22):
//   - MaxRetries -1: no command is resent after a failure (a dead Redis
//     costs one Timeout, and the proxy answers 503 at once);
//   - DialerRetries 1: one dial attempt (the default is 5, 100 ms apart);
//   - PoolTimeout = Timeout, and ContextTimeoutEnabled, so a caller's
//     deadline also bounds a call (with LiveTimeout, a hook puts the
//     current bound into every call's context, and that decides: see
//     [Timeout]);
//   - Cluster MaxRedirects 1: one MOVED/ASK redirect is followed (needed
//     after a failover or during resharding); go-redis also uses it to
//     resend after a network error, so a hung Cluster node can cost up to
//     2 × Timeout unless the caller's context has a tighter deadline. The
//     store's scripts are safe to run twice.
//   - RESP2 and no CLIENT SETINFO or maintenance notifications: nothing is
//     sent on connect beyond HELLO 2 (with AUTH; AUTH alone where HELLO is
//     unknown) and SELECT, for the widest server support.
func NewClient(opts ClientOptions) (redis.UniversalClient, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("redisstore: no Redis address")
	}
	for _, a := range opts.Addrs {
		if a == "" {
			return nil, errors.New("redisstore: empty Redis address")
		}
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("redisstore: timeout %v: want >= 0", opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.LiveTimeout != nil {
		opts.Timeout = opts.LiveTimeout.Load()
	}
	cluster := opts.ClusterMode || (opts.MasterName == "" && len(opts.Addrs) > 1)
	if cluster && opts.MasterName != "" {
		return nil, errors.New("redisstore: master name (Sentinel) and Cluster mode exclude each other")
	}
	if cluster && opts.DB != 0 {
		return nil, fmt.Errorf("redisstore: db %d: Redis Cluster has only db 0", opts.DB)
	}
	// One set of options for every topology, so the three cannot drift
	// apart; go-redis converts it with Failover, Cluster and Simple.
	dial, rw := opts.Timeout, opts.Timeout
	if opts.LiveTimeout != nil {
		// The hook's context decides (timeoutHook): reads and writes take
		// no deadline of their own, dials and pool waits a backstop for
		// what no hook sees (liveDialBackstop).
		dial, rw = max(opts.Timeout, liveDialBackstop), -1
	}
	u := &redis.UniversalOptions{
		Addrs:                    opts.Addrs,
		MasterName:               opts.MasterName,
		SentinelUsername:         opts.SentinelUsername,
		SentinelPassword:         opts.SentinelPassword,
		Username:                 opts.Username,
		Password:                 opts.Password,
		DB:                       opts.DB,
		TLSConfig:                opts.TLS,
		Protocol:                 2,
		DisableIdentity:          true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		DialTimeout:              dial,
		ReadTimeout:              rw,
		WriteTimeout:             rw,
		PoolTimeout:              dial,
		ContextTimeoutEnabled:    true,
		MaxRetries:               -1,
		MaxRedirects:             1,
		DialerRetries:            1,
		PoolSize:                 opts.PoolSize,
		ConnMaxIdleTime:          5 * time.Minute,
	}
	var c redis.UniversalClient
	switch {
	case opts.MasterName != "":
		c = redis.NewFailoverClient(u.Failover())
	case cluster:
		c = redis.NewClusterClient(u.Cluster())
	default:
		o := u.Simple()
		o.MaintNotificationsConfig = u.MaintNotificationsConfig
		c = redis.NewClient(o)
	}
	if opts.LiveTimeout != nil {
		hookTimeout(c, opts.LiveTimeout)
	}
	return c, nil
}

// liveDialBackstop is a live-timeout client's own dial and pool-wait
// timeout (or the timeout it was made with, when longer). A call is bounded
// by its hook first; this bounds what no hook sees: the dials a Sentinel
// lookup's own clients make in the background. A live timeout raised above
// it leaves a dial bounded by it.
const liveDialBackstop = 10 * time.Second
