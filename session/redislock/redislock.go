// Package redislock is the [session.Locker] shared by every replica of the
// proxy through Redis: a lease lock per session, with an owner token, a
// fencing token, renewal while the turn runs and compare-and-delete release.
//
// # Keys
//
// For a session key k (a hash: raw session ids never reach Redis), with
// hex = k.String() and P the key prefix:
//
//	P + "session:{" + hex + "}"        the lock: the holder's random owner token, PX lease
//	P + "session:{" + hex + "}:next"   the waiter whose turn is next, PX NextTTL
//	P + "session:{" + hex + "}:fence"  the last fencing token, PX 2 × lease
//
// The braces make hex the Redis Cluster hash tag, so every script touches
// one slot. None of these keys matches the key store's records
// (P + "{" + hex + "}").
//
// # Acquire, renew, release
//
// Each step is one Lua script (atomic, one round trip). Acquire takes the
// lock when it is free and the "next" slot is empty or the caller's; the
// fencing token is then max(last + 1, Redis TIME in µs), so it grows for
// every new holder, and after the fence key expired it still does unless
// Redis's clock went back. A holder renews its lease every lease/3 by
// compare-and-PEXPIRE, and releases by compare-and-delete, which also
// publishes the session's hex key on P + "session:released".
//
// # Waiting and fairness
//
// A waiter that finds the lock held claims the "next" slot if nobody has,
// so that when the holder releases, a waiter of another replica goes before
// the holder's own replica's next request (whose local queue would
// otherwise win every race, having no round trip to make). Waiters wake on
// the release message (one subscription per Locker) and, because Redis
// pub/sub may drop messages, also poll at a jittered interval of at most
// PollInterval (and never later than the holder's lease end). A waiter that
// gives up clears its "next" claim; a crashed waiter's claim lapses after
// NextTTL.
//
// # Failures
//
// A holder that crashes stops renewing: its lock ends with its lease, and
// the next waiter takes it within one poll. A Redis error is returned to
// the caller (the session queue then runs the turn on its local queue
// alone and counts the fallback). A renewal that finds the lock gone (the
// lease ran out during a pause, or a failover lost it) is logged and
// reported through [Options.LockLost]; the running request is not stopped.
package redislock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/rediskey"
	"github.com/idemgate/idemgate/session"
)

// Defaults of [Options].
const (
	DefaultKeyPrefix    = rediskey.DefaultPrefix
	DefaultLease        = 10 * time.Second
	DefaultPollInterval = 200 * time.Millisecond
	DefaultNextTTL      = time.Second
	// callTimeout bounds a call made outside any request's context
	// (renewal, release, clean-up). The client's own timeout is usually
	// shorter.
	callTimeout = 2 * time.Second
	// maxCleanups bounds the clean-ups of failed acquires in flight.
	maxCleanups = 64
)

// ErrClosed is returned by Lock after Close.
var ErrClosed = errors.New("redislock: closed")

// Options configure a [Locker].
type Options struct {
	// KeyPrefix starts every key; it must not contain '{' or '}'. Default
	// [DefaultKeyPrefix]. Use the key store's prefix.
	KeyPrefix string
	// Lease is how long a lock outlives its holder's last renewal (renewed
	// every Lease/3): the longest a crashed holder blocks its session.
	// Default [DefaultLease].
	Lease time.Duration
	// PollInterval is the longest a waiter sleeps between attempts when no
	// release message arrives; each sleep is jittered to 50–100 % of it.
	// Default [DefaultPollInterval].
	PollInterval time.Duration
	// NextTTL is how long a waiter's claim on the next turn lasts without
	// being refreshed (each attempt refreshes it). It must exceed
	// PollInterval. Default [DefaultNextTTL].
	NextTTL time.Duration
	// LockLost, when set, is called when a renewal finds the lock no longer
	// held by its holder (for a metric).
	LockLost func()
	// Logger receives renewal and release failures. Default: discard.
	Logger *slog.Logger
}

// Locker is a [session.Locker] on Redis. It is safe for concurrent use.
// It owns one subscription and the renewal goroutines of the locks it
// hands out; [Locker.Close] stops them. It does not own the client.
type Locker struct {
	client  redis.UniversalClient
	prefix  string
	channel string
	lease   time.Duration
	poll    time.Duration
	nextTTL time.Duration
	lost    func()
	log     *slog.Logger

	ps       *redis.PubSub
	ctx      context.Context // canceled by Close: stops renewals
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	cleanups chan struct{} // semaphore for clean-ups

	// attempted, when set (tests), runs after each failed attempt.
	attempted func()

	mu      sync.Mutex                            // protects waiters, closed
	waiters map[session.Key]map[chan struct{}]int // waiting Lock calls per session
	closed  bool
}

var _ session.Locker = (*Locker)(nil)

// New returns a Locker on client and subscribes to release messages. The
// subscription connects in the background (and reconnects after
// failures); until it does, waiters rely on polling.
func New(client redis.UniversalClient, opts Options) (*Locker, error) {
	if err := rediskey.Check("redislock", client, &opts.KeyPrefix); err != nil {
		return nil, err
	}
	if opts.Lease == 0 {
		opts.Lease = DefaultLease
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.NextTTL == 0 {
		opts.NextTTL = DefaultNextTTL
	}
	switch {
	case opts.Lease < 3*time.Millisecond:
		return nil, fmt.Errorf("redislock: lease %v: want >= 3ms", opts.Lease)
	case opts.PollInterval < 2*time.Millisecond:
		return nil, fmt.Errorf("redislock: poll interval %v: want >= 2ms", opts.PollInterval)
	case opts.NextTTL <= opts.PollInterval:
		return nil, fmt.Errorf("redislock: next TTL %v: want > poll interval %v", opts.NextTTL, opts.PollInterval)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Locker{
		client:   client,
		prefix:   opts.KeyPrefix,
		channel:  opts.KeyPrefix + "session:released",
		lease:    opts.Lease,
		poll:     opts.PollInterval,
		nextTTL:  opts.NextTTL,
		lost:     opts.LockLost,
		log:      opts.Logger,
		ctx:      ctx,
		cancel:   cancel,
		cleanups: make(chan struct{}, maxCleanups),
		waiters:  make(map[session.Key]map[chan struct{}]int),
	}
	// Subscribe sends SUBSCRIBE now; when that fails, the channel's
	// receive loop reconnects and resubscribes.
	l.ps = client.Subscribe(ctx, l.channel)
	l.goOwned(func() {
		// The first reply confirms the subscription or refuses it (the
		// channel not granted to the ACL user: rediskey.Confirm), and
		// every waiter for a turn would wait for its poll. Say so once,
		// unless the locker was closed meanwhile. The subscription is
		// kept: a confirmation that comes late counts, and a refusal
		// lasts until the connection is made again (a restart, after the
		// ACL is fixed).
		err := rediskey.Confirm(ctx, l.ps, rediskey.ReadTimeout(client, subscribeTimeout))
		if err != nil && ctx.Err() == nil && !errors.Is(err, redis.ErrClosed) {
			l.log.Warn("session turns: the release subscription was refused or not confirmed; waiters fall back to their poll",
				"channel", l.channel, "error", err)
		}
		msgs := l.ps.Channel(redis.WithChannelHealthCheckInterval(time.Second))
		for m := range msgs { // closed by ps.Close
			l.wake(m.Payload)
		}
	})
	return l, nil
}

// subscribeTimeout bounds the wait for the release subscription's first
// reply, after which a missing confirmation is logged, when the client's
// own read timeout is unknown.
const subscribeTimeout = 5 * time.Second

// Close stops the subscription and the renewals, and waits for them. Locks
// still held are not released: they end with their lease. Close is
// idempotent.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	err := l.ps.Close()
	l.wg.Wait()
	return err
}

type keys struct {
	hex  string
	lock string
	next string
	fenc string
}

func (l *Locker) keys(k session.Key) keys {
	h := k.String()
	base := l.prefix + "session:{" + h + "}"
	return keys{hex: h, lock: base, next: base + ":next", fenc: base + ":fence"}
}

// token returns a random owner token.
func token() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Lock implements [session.Locker].
func (l *Locker) Lock(ctx context.Context, k session.Key, waiting func()) (session.Lock, error) {
	if l.isClosed() {
		return nil, ErrClosed
	}
	ks := l.keys(k)
	tok := token()
	var wake chan struct{}
	defer func() {
		if wake != nil {
			l.unregister(k, wake)
		}
	}()
	for {
		fence, wait, err := l.acquire(ctx, ks, tok)
		if err != nil {
			// The script may have run before the error: undo whatever it
			// did, off the request path.
			l.cleanup(ks, tok)
			if cerr := ctxEnded(ctx); cerr != nil {
				return nil, cerr
			}
			return nil, err
		}
		if fence != 0 {
			return l.hold(ks, tok, fence), nil
		}
		if l.attempted != nil {
			l.attempted()
		}
		if wake == nil {
			// Listen for releases, then try again at once: a release
			// between the first attempt and now would be missed otherwise.
			wake = l.register(k)
			if waiting != nil {
				waiting()
			}
			continue
		}
		t := time.NewTimer(l.jitter(wait))
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			l.cleanup(ks, tok)
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// ctxEnded returns ctx's error, or DeadlineExceeded when its deadline has
// passed but its timer has not fired yet: the connection's deadline, set
// from ctx's, can fail a call just before, and that is no outage.
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// jitter returns the sleep before the next attempt: 50–100 % of the poll
// interval, or of the holder's remaining lease when that is shorter.
func (l *Locker) jitter(remaining time.Duration) time.Duration {
	d := l.poll
	if remaining > 0 && remaining < d {
		d = remaining + time.Millisecond
	}
	return d/2 + mrand.N(d/2+1)
}

// acquire runs the acquire script once. It returns the fencing token when
// the lock was taken, or 0 and the holder's remaining lease.
func (l *Locker) acquire(ctx context.Context, ks keys, tok string) (fence uint64, wait time.Duration, err error) {
	v, err := acquireScript.Run(ctx, l.client, []string{ks.lock, ks.next, ks.fenc},
		tok, l.lease.Milliseconds(), l.nextTTL.Milliseconds()).Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("redislock: acquire: %w", err)
	}
	if len(v) != 2 {
		return 0, 0, errors.New("redislock: acquire: malformed reply")
	}
	code, _ := v[0].(int64)
	switch code {
	case codeHeld:
		s, _ := v[1].(string)
		f, perr := strconv.ParseUint(s, 10, 64)
		if perr != nil || f == 0 {
			return 0, 0, fmt.Errorf("redislock: acquire: malformed fence %q", s)
		}
		return f, 0, nil
	case codeNotHeld:
		ms, _ := v[1].(int64)
		return 0, time.Duration(ms) * time.Millisecond, nil
	}
	return 0, 0, fmt.Errorf("redislock: acquire: unknown reply code %d", code)
}

// cleanup releases tok's lock and "next" claim, if the script left them,
// in the background: a bounded number at once; past that the keys end with
// their TTLs.
func (l *Locker) cleanup(ks keys, tok string) {
	select {
	case l.cleanups <- struct{}{}:
	default:
		return
	}
	ok := l.goOwned(func() {
		defer func() { <-l.cleanups }()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), callTimeout)
		defer cancel()
		if err := cleanupScript.Run(ctx, l.client, []string{ks.lock, ks.next}, tok, l.channel, ks.hex).Err(); err != nil && !errors.Is(err, redis.Nil) {
			l.log.Debug("session lock clean-up failed", "error", err)
		}
	})
	if !ok {
		<-l.cleanups
	}
}

// isClosed reports whether Close was called.
func (l *Locker) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// goOwned runs f on a goroutine that Close waits for, unless the Locker is
// closed.
func (l *Locker) goOwned(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
	return true
}

// register returns a channel that receives a value when k's lock is
// released.
func (l *Locker) register(k session.Key) chan struct{} {
	c := make(chan struct{}, 1)
	l.mu.Lock()
	m := l.waiters[k]
	if m == nil {
		m = make(map[chan struct{}]int)
		l.waiters[k] = m
	}
	m[c] = 0
	l.mu.Unlock()
	return c
}

func (l *Locker) unregister(k session.Key, c chan struct{}) {
	l.mu.Lock()
	if m := l.waiters[k]; m != nil {
		delete(m, c)
		if len(m) == 0 {
			delete(l.waiters, k)
		}
	}
	l.mu.Unlock()
}

// wake signals every waiter of the session whose hex key is payload.
func (l *Locker) wake(payload string) {
	var k session.Key
	if len(payload) != 2*len(k) {
		return
	}
	if _, err := hex.Decode(k[:], []byte(payload)); err != nil {
		return
	}
	l.mu.Lock()
	for c := range l.waiters[k] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	l.mu.Unlock()
}

// lease is a held lock.
type lease struct {
	l     *Locker
	ks    keys
	tok   string
	fence uint64
	once  sync.Once
	stop  chan struct{}
	done  chan struct{}
}

// hold starts renewing a freshly taken lock.
func (l *Locker) hold(ks keys, tok string, fence uint64) *lease {
	h := &lease{l: l, ks: ks, tok: tok, fence: fence, stop: make(chan struct{}), done: make(chan struct{})}
	if !l.goOwned(h.renew) {
		close(h.done) // closed: the lock ends with its lease
	}
	return h
}

// Fence implements [session.Lock].
func (h *lease) Fence() uint64 { return h.fence }

// renew extends the lease every lease/3 until Unlock, Close, or the lock is
// found lost.
func (h *lease) renew() {
	l := h.l
	defer close(h.done)
	t := time.NewTicker(max(l.lease/3, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(l.ctx, callTimeout)
		n, err := renewScript.Run(ctx, l.client, []string{h.ks.lock}, h.tok, l.lease.Milliseconds()).Int64()
		cancel()
		switch {
		case err != nil:
			if l.ctx.Err() == nil {
				l.log.Warn("session lock renewal failed", "error", err)
			}
		case n == codeNotHeld:
			l.log.Warn("session lock lost while its turn ran")
			if l.lost != nil {
				l.lost()
			}
			return
		}
	}
}

// Unlock implements [session.Lock]: it stops the renewals and releases the
// lock by compare-and-delete, publishing the release. A failure is logged;
// the lock then ends with its lease.
func (h *lease) Unlock() {
	h.once.Do(func() {
		close(h.stop)
		<-h.done
		l := h.l
		ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), callTimeout)
		defer cancel()
		if err := releaseScript.Run(ctx, l.client, []string{h.ks.lock}, h.tok, l.channel, h.ks.hex).Err(); err != nil {
			l.log.Warn("session lock release failed; it ends with its lease", "error", err)
		}
	})
}
