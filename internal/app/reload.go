package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/errtree"
	"github.com/idemgate/idemgate/keystore/sealed"
)

// reloadState is the state of the configuration reload (DESIGN.md's routes,
// limits and session settings, replaced without a restart).
type reloadState struct {
	mu       sync.Mutex     // protects the fields below; one reload at a time
	live     *config.Config // what runs: the file's reloadable keys, the start's others
	started  bool           // the watcher delivered its first read
	limiters closeStack     // what the running limiters opened
	queue    closeStack     // what the running session queue opened
	identity closeStack     // what the running identity resolver opened
	closed   bool

	// Watch timing; zero takes config.Watch's defaults (tests shorten them).
	debounce, poll time.Duration
}

// close closes the running limiters and queue; later reloads do nothing.
// The app's stack runs it after the proxy closed.
func (rs *reloadState) close() error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.closed = true
	return errors.Join(rs.identity.close(), rs.queue.close(), rs.limiters.close())
}

// liveConfig returns the running config: the file's reloadable keys, the
// start's others.
func (a *App) liveConfig() *config.Config {
	a.reload.mu.Lock()
	defer a.reload.mu.Unlock()
	if a.reload.live == nil {
		return a.cfg
	}
	return a.reload.live
}

// startReload runs the reload loop in g until ctx ends: config.Watch on the
// config file (events, a periodic poll) and SIGHUP, which forces a read.
func (a *App) startReload(ctx context.Context, g *errgroup.Group) {
	path := a.o.ConfigPath
	if path == "" {
		return
	}
	kick := make(chan struct{}, 1)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	g.Go(func() error {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-hup:
				a.log.Info("SIGHUP: reading the config file", "component", "reload", "file", path)
				select {
				case kick <- struct{}{}:
				default: // a read is already due
				}
			}
		}
	})
	g.Go(func() error {
		return config.Watch(ctx, path, config.WatchOptions{
			Debounce: a.reload.debounce,
			Poll:     a.reload.poll,
			Reload:   kick,
			Logger:   a.log.With("component", "reload", "file", path),
		}, a.applyConfig)
	})
}

// parseConfig decodes and validates a config file's content, as main does
// for the file at start.
func parseConfig(data []byte) (*config.Config, error) {
	cfg, err := config.Parse(data)
	if err != nil {
		return nil, err
	}
	return cfg, cfg.Validate()
}

// applyConfig is the reload: it parses the file's new content and, if it is
// valid, replaces the proxy's routing (routes, modes, limit stages, session
// stage) atomically; requests already running finish on the old one. An
// invalid file is refused with one log line and
// idemgate_config_reloads_total{result="failure"}: the running config keeps
// serving. Changes to keys that need a restart are logged (and
// idemgate_config_restart_required set) and ignored until the restart.
func (a *App) applyConfig(data []byte, readErr error) {
	rs := &a.reload
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.closed {
		return
	}
	if rs.live == nil {
		rs.live = a.cfg
	}
	first := !rs.started
	rs.started = true
	log := a.log.With("component", "reload", "file", a.o.ConfigPath)
	refuse := func(msg string, err error) {
		log.Error(msg+"; the running config keeps serving", "problems", problemLines(err))
		a.reloads.observe(false, false)
		a.recordReload("refused", nil, problemLines(err), nil)
	}
	if readErr != nil {
		refuse("config reload refused: the file cannot be read", readErr)
		return
	}
	next, err := parseConfig(data)
	if err != nil {
		refuse("config reload refused: invalid config", err)
		return
	}
	d := config.Compare(a.cfg, next)
	restart := d.Restart
	if d.Refused != nil {
		// The file is valid on its own, but what would run is the file
		// with the running values of the keys that need a restart: a
		// route's timeout checked against the file's max_lease, say, and
		// then served under the running one, would outlive its lease.
		refuse("config reload refused: the file is valid, but not with the running values of the keys that need a restart ("+
			strings.Join(restart, ", ")+"); restart to apply it", d.Refused)
		return
	}
	applied := next.WithKeys(a.cfg, restart)
	changed := config.ChangedKeys(rs.live, applied)
	switch {
	case len(changed) > 0:
		effects := config.Compare(rs.live, applied).Effects
		if err := a.applyPolicy(applied); err != nil {
			refuse("config reload refused", err)
			return
		}
		rs.live = applied
		log.Info("config reloaded", "changed", changed, "routes", len(applied.Routes))
		if len(effects) > 0 {
			// DESIGN.md: a reload that changes fingerprints or scopes
			// says so (idemgate validate --diff does too).
			log.Warn("config reload affects retries of writes made before it", "effects", effects)
		}
		a.recordReload("applied", data, nil, restart)
	case first && len(restart) == 0:
		a.recordReload("", data, nil, nil)
		return // the watcher's first read: what the app started with
	default:
		log.Info("config file read; nothing to apply")
		a.recordReload("unchanged", nil, nil, restart)
	}
	if len(restart) > 0 {
		log.Warn("config changes need a restart; they are ignored until then", "keys", restart)
	}
	a.reloads.observe(true, len(restart) > 0)
}

// sealingChanged logs a change of idempotency.encryption_key_env: from
// the next write on, answers are sealed with the new key (or stored as
// they come); the ones sealed before still open here, with the kept
// earlier keys, but not after a restart, which reads only the file's key,
// nor on replicas that have not loaded the change yet.
func (a *App) sealingChanged(applied *config.Config, kept int) {
	env := applied.Idempotency.EncryptionKeyEnv
	what := "answers are sealed with the key in " + env + "; answers stored unsealed before fail closed (503) until they expire"
	if env == "" {
		what = "answers are stored unsealed"
	}
	a.log.Warn("idempotency.encryption_key_env changed: from the next write on, "+what+
		"; answers sealed before still open in this process (with the earlier keys it kept), but not after a restart, which knows only the file's key, nor on a replica until it reloads the same change",
		"component", "reload", "variable", env, "earlier_keys_kept", kept)
}

// applyPolicy builds the policy of applied with the builder New uses and
// applies it to the proxy, and sets the running parts that keep state
// (setters; see applyLive). The limiters, the queue, the identity
// resolver and the certificate source (tls.*) are rebuilt only when their
// settings changed, so that a change
// of routes alone keeps every client's counts and every session's line.
// The old ones only serve requests that were already running (a limiter
// and a queue answer after Close); they close once the swap is done.
// rs.mu is held.
func (a *App) applyPolicy(applied *config.Config) error {
	rs := &a.reload
	cur := a.proxy.Policy()
	var limiters, queue, ident closeStack
	var certs *tlsSource // a rebuilt certificate source
	undo := func() {
		if certs != nil {
			certs.closers.close()
		}
		ident.close()
		queue.close()
		limiters.close()
	}
	set := a.limits.Load()
	if limitsChanged(rs.live, applied) {
		var err error
		if set, err = newLimiters(applied, a.redisTimeout, a.log, &limiters); err != nil {
			undo()
			return err
		}
	}
	id := cur.Identity
	newID := identityChanged(rs.live, applied)
	if newID {
		var err error
		if id, err = newIdentity(applied, a.o.Now, a.log, &ident); err != nil {
			undo()
			return err
		}
	}
	q := cur.Sessions
	newQ := sessionsChanged(rs.live, applied, cur.Sessions != nil)
	if newQ {
		var err error
		if q, err = newQueue(applied, a.redisTimeout, a.log, a.metrics.Session(), &queue); err != nil {
			undo()
			return err
		}
	}
	if tlsChanged(rs.live, applied) {
		var err error
		if certs, err = a.tls.rebuild(applied); err != nil {
			undo()
			return err
		}
	}
	sealKeys, err := a.built.sealKeysFor(rs.live, applied)
	if err != nil {
		undo()
		return err
	}
	pol, err := proxyPolicy(applied, set, q, id)
	if err == nil && sealKeys != nil {
		// Before the policy: a route's reconcile probe needs sealing
		// (validate), so sealing is on before such a route runs.
		err = a.built.sealed.SetKeys(sealKeys[0], sealKeys[1:]...)
	}
	if err == nil {
		err = a.proxy.Apply(pol)
	}
	if err != nil {
		if sealKeys != nil {
			// Back to the running key, keeping the new one to open what
			// it sealed meanwhile (they were valid when set).
			k := slices.Clone(a.built.sealKeys)
			if n := sealKeys[0]; n != (sealed.Key{}) && !slices.Contains(k, n) {
				k = append(k, n)
			}
			_ = a.built.sealed.SetKeys(k[0], k[1:]...)
			a.built.sealKeys = k
		}
		undo()
		return err
	}
	if sealKeys != nil {
		a.built.sealKeys = sealKeys
		// The replay cache holds opened answers: what it cached while
		// sealing was off was never authenticated.
		a.built.purgeCache()
		a.sealingChanged(applied, len(sealKeys)-1)
	}
	initRouteSeries(a.store, a.reloads, applied)
	a.applyLive(applied)
	if set != a.limits.Load() {
		rs.limiters.close()
		rs.limiters = limiters
		a.limits.Store(set)
	}
	if newQ {
		rs.queue.close()
		rs.queue = queue
	}
	if newID {
		rs.identity.close()
		rs.identity = ident
	}
	if certs != nil {
		a.tls.swap(certs)
	}
	return nil
}

// tlsChanged reports whether the certificate source must be rebuilt: a tls
// key changed (tls.mode and tls.http_listen need a restart, so they keep
// their running values in next).
func tlsChanged(old, next *config.Config) bool {
	return slices.ContainsFunc(config.ChangedKeys(old, next), func(k string) bool { return strings.HasPrefix(k, "tls.") })
}

// applyLive sets the running parts that keep state to applied's values
// (their setters): the store's record format, every Redis client's
// timeout, the store's compression and capacity, the listeners'
// max_connections and max_header_bytes (from the next request head, and
// the next HTTP/2 connection), and the admin API and console. The
// proxy's buffered-bytes budget follows its policy (Proxy.Apply).
// reload.mu is held.
func (a *App) applyLive(applied *config.Config) {
	if r := a.built.redis; r != nil {
		// Checked by validation: the format is one of the two.
		_ = r.SetRecordFormat(recordFormat(applied))
	}
	a.redisTimeout.Set(applied.Store.Redis.Timeout)
	a.built.compressed.Set(compression(applied))
	if m := a.built.mem; m != nil {
		m.SetLimits(applied.Store.Memory.MaxEntries, applied.Store.Memory.MaxBytes)
	}
	for _, l := range a.conns {
		l.SetLimit(applied.MaxConnections)
	}
	if a.headerLimit != nil {
		a.headerLimit.Set(applied.MaxHeaderBytes)
	}
	a.reloadAdmin(applied)
}

// limitsChanged reports whether the limit stages must be rebuilt: the edge
// limit, the limiter settings, or any route's rate_limit (or the set of
// limited routes) changed.
func limitsChanged(old, next *config.Config) bool {
	if !reflect.DeepEqual(old.EdgeLimit, next.EdgeLimit) || !reflect.DeepEqual(old.Limiter, next.Limiter) {
		return true
	}
	return !reflect.DeepEqual(rateLimits(old), rateLimits(next))
}

func rateLimits(c *config.Config) map[string]config.RateLimit {
	m := map[string]config.RateLimit{}
	for _, r := range c.Routes {
		if r.RateLimit != nil {
			m[r.Name] = *r.RateLimit
		}
	}
	return m
}

// sessionsChanged reports whether the session stage must be rebuilt: its
// settings changed, or a route now takes turns and there is no stage yet.
// (Session routes that change keep the running stage: it reads each
// request's route.)
func sessionsChanged(old, next *config.Config, haveStage bool) bool {
	if !reflect.DeepEqual(old.Sessions, next.Sessions) {
		return true
	}
	if haveStage {
		return false
	}
	for _, r := range next.Routes {
		if r.Session != nil {
			return true
		}
	}
	return false
}

// problemLines splits joined errors into one string each, for one log line.
func problemLines(err error) []string {
	var out []string
	for e := range errtree.Leaves(err) {
		for l := range strings.SplitSeq(e.Error(), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	if len(out) == 0 {
		out = []string{fmt.Sprint(err)}
	}
	return out
}
