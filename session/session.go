package session

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of [Options].
const (
	DefaultQueueTimeout = 30 * time.Second
)

// Errors of [Queue.Acquire]. The proxy answers both with 503 session_busy.
var (
	// ErrQueueFull: QueueDepth requests already wait for the session.
	ErrQueueFull = errors.New("session: queue full")
	// ErrTimeout: the turn did not come within QueueTimeout.
	ErrTimeout = errors.New("session: no turn within the queue timeout")
)

// Key identifies a session: the SHA-256 of its scope. See [NewKey].
type Key [sha256.Size]byte

// NewKey hashes the parts of a session's scope into a Key. Each part is
// length-prefixed, so no two different part lists share an encoding.
func NewKey(parts ...string) Key {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	var k Key
	h.Sum(k[:0])
	return k
}

// String returns the key in lower-case hex.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// Locker is a lock shared by every process serving the same sessions (see
// package redislock). A [Queue] asks for it only for the holder of a local
// turn, so each process has at most one contender per session.
type Locker interface {
	// Lock returns once the caller holds k's lock, or fails. It calls
	// waiting (when non-nil) at most once, on the caller's goroutine, just
	// before it starts to wait because another holder has the lock. When
	// ctx ends first it returns ctx's error; any other error means the lock
	// could not be reached, and the caller then runs without it.
	Lock(ctx context.Context, k Key, waiting func()) (Lock, error)
}

// Lock is a held [Locker] lock.
type Lock interface {
	// Fence is the lock's fencing token: it grows with every new holder of
	// the session's lock.
	Fence() uint64
	// Unlock releases the lock and stops renewing it. It is safe to call
	// more than once.
	Unlock()
}

// Result says how a wait for a turn ended, for [Metrics].
type Result string

// Results.
const (
	ResultTurn     Result = "turn"       // the request got its turn
	ResultFull     Result = "queue_full" // refused at once: the line was full
	ResultTimeout  Result = "timeout"    // no turn within QueueTimeout
	ResultCanceled Result = "canceled"   // the request's context ended (the client left)
)

// Metrics receives a [Queue]'s events, for the operations metrics. Its
// methods are called on the request path, never under the queue's locks,
// from many goroutines at once: they must be safe for concurrent use and
// fast. Embed [NopMetrics] to implement only some of them.
type Metrics interface {
	// Waiting adds delta (+1 or -1) to the number of requests waiting for
	// a turn, over all sessions; a holder waiting for the shared lock is
	// one of them.
	Waiting(delta int)
	// Waited observes how long a request that had to wait waited, and how
	// its wait ended (ResultTurn, ResultTimeout or ResultCanceled).
	Waited(d time.Duration, r Result)
	// Rejected counts a request refused a turn: ResultFull or ResultTimeout.
	Rejected(r Result)
	// Fallback counts a turn that runs without the shared lock because the
	// Locker could not be reached.
	Fallback()
}

// NopMetrics is a [Metrics] that records nothing.
type NopMetrics struct{}

func (NopMetrics) Waiting(int)                  {}
func (NopMetrics) Waited(time.Duration, Result) {}
func (NopMetrics) Rejected(Result)              {}
func (NopMetrics) Fallback()                    {}

// Options configure a [Queue].
type Options struct {
	// QueueDepth is how many requests may wait per session behind the one
	// holding the turn. It is taken as given: 0 lets none wait. Negative is
	// an error.
	QueueDepth int
	// QueueTimeout bounds a request's wait for its turn, waiting for the
	// shared lock included. Default [DefaultQueueTimeout].
	QueueTimeout time.Duration
	// Locker, when set, is the lock shared across processes that the holder
	// of a local turn must also take. Nil: turns are per process.
	Locker Locker
	// Metrics receives the queue's events. Default [NopMetrics].
	Metrics Metrics
	// Logger receives fallbacks to the local queue. Default: discard.
	Logger *slog.Logger
	// Now stamps when a turn is taken, for [Queue.Oldest]. Default
	// time.Now. (Waits are timed on the real clock: their deadlines are
	// contexts'.)
	Now func() time.Time
}

// numShards spreads sessions over several maps and locks, so that turns of
// different sessions do not contend. Keys are hashes: their first byte
// picks the shard.
const numShards = 64

// Queue hands out turns per session. It is safe for concurrent use; its
// zero value is not usable: build it with [New]. A Queue owns no
// goroutines and needs no Close (its Locker has its own).
type Queue struct {
	depth   int
	timeout time.Duration
	locker  Locker
	metrics Metrics
	log     *slog.Logger
	now     func() time.Time
	shards  [numShards]shard
}

type shard struct {
	mu    sync.Mutex // protects lines and every line in it
	lines map[Key]*line
}

// line is one session with a request in flight: the holder of its turn and
// the requests waiting behind it. It exists exactly as long as the turn is
// held.
type line struct {
	since   time.Time // when the current holder got the turn
	locking bool      // the holder waits for the shared lock: it counts as waiting
	waiters []*waiter // FIFO
}

// waiting is the number of requests counted against the queue depth.
func (l *line) waiting() int {
	n := len(l.waiters)
	if l.locking {
		n++
	}
	return n
}

type waiter struct {
	ready   chan struct{} // closed when the turn is handed to this waiter
	granted bool          // the turn was handed over (set with ready closed)
}

// New returns a Queue for opts.
func New(opts Options) (*Queue, error) {
	if opts.QueueDepth < 0 {
		return nil, fmt.Errorf("session: queue depth %d: want >= 0", opts.QueueDepth)
	}
	if opts.QueueTimeout < 0 {
		return nil, fmt.Errorf("session: queue timeout %v: want >= 0", opts.QueueTimeout)
	}
	if opts.QueueTimeout == 0 {
		opts.QueueTimeout = DefaultQueueTimeout
	}
	if opts.Metrics == nil {
		opts.Metrics = NopMetrics{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	q := &Queue{
		depth:   opts.QueueDepth,
		timeout: opts.QueueTimeout,
		locker:  opts.Locker,
		metrics: opts.Metrics,
		log:     opts.Logger,
		now:     opts.Now,
	}
	for i := range q.shards {
		q.shards[i].lines = make(map[Key]*line)
	}
	return q, nil
}

func (q *Queue) shard(k Key) *shard { return &q.shards[int(k[0])%numShards] }

// Turn is a held turn. End it when the request is done; further calls do
// nothing.
type Turn struct {
	q     *Queue
	key   Key
	line  *line
	lock  Lock
	ended atomic.Bool
}

// Fence returns the shared lock's fencing token, or 0 when the turn holds
// no shared lock (no Locker, or a fallback).
func (t *Turn) Fence() uint64 {
	if t.lock == nil {
		return 0
	}
	return t.lock.Fence()
}

// End gives the turn up: it unlocks the shared lock (if held), then hands
// the turn to the first waiter, or removes the session when nobody waits.
func (t *Turn) End() {
	if t.ended.Swap(true) {
		return
	}
	if t.lock != nil {
		t.lock.Unlock()
	}
	t.q.handOff(t.key, t.line)
}

// Acquire waits for k's turn, in arrival order. It fails with ErrQueueFull
// at once when QueueDepth requests already wait, with ErrTimeout when the
// turn did not come within QueueTimeout, or with ctx's error when ctx ends
// first; the request then has left the line. On success the caller must
// call [Turn.End].
func (q *Queue) Acquire(ctx context.Context, k Key) (*Turn, error) {
	return q.AcquireUntil(ctx, k, time.Time{})
}

// AcquireUntil is [Queue.Acquire] with a deadline of the request's own (a
// keyed write's timeout, counted from its arrival; DESIGN.md step 6): the
// wait ends with ErrTimeout at QueueTimeout or at deadline, whichever comes
// first. A zero deadline is none.
func (q *Queue) AcquireUntil(ctx context.Context, k Key, deadline time.Time) (*Turn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := time.Now()
	end := start.Add(q.timeout)
	if !deadline.IsZero() && deadline.Before(end) {
		end = deadline
	}
	sh := q.shard(k)
	sh.mu.Lock()
	l := sh.lines[k]
	if l == nil {
		// Nobody holds the turn: take it (the fast path).
		l = &line{since: q.now()}
		sh.lines[k] = l
		sh.mu.Unlock()
		return q.lockShared(ctx, nil, k, l, start, end)
	}
	if l.waiting() >= q.depth {
		sh.mu.Unlock()
		q.metrics.Rejected(ResultFull)
		return nil, ErrQueueFull
	}
	w := &waiter{ready: make(chan struct{})}
	l.waiters = append(l.waiters, w)
	sh.mu.Unlock()
	q.metrics.Waiting(1)

	wctx, cancel := context.WithDeadlineCause(ctx, end, ErrTimeout)
	defer cancel()
	select {
	case <-w.ready:
		q.metrics.Waiting(-1)
		return q.lockShared(ctx, wctx, k, l, start, end)
	case <-wctx.Done():
	}
	sh.mu.Lock()
	granted := w.granted
	if !granted {
		for i, x := range l.waiters {
			if x == w {
				l.waiters = append(l.waiters[:i], l.waiters[i+1:]...)
				break
			}
		}
	}
	sh.mu.Unlock()
	q.metrics.Waiting(-1)
	if granted {
		// Handed the turn just as the wait ended: pass it on.
		q.handOff(k, l)
	}
	return nil, q.waitFailed(ctx, wctx, start)
}

// lockShared takes the shared lock for the holder of k's local turn. wctx,
// when not nil, is the wait's context with the wait's deadline end (the
// request waited in the line).
func (q *Queue) lockShared(ctx, wctx context.Context, k Key, l *line, start, end time.Time) (*Turn, error) {
	t := &Turn{q: q, key: k, line: l}
	waited := wctx != nil
	if q.locker == nil {
		if waited {
			q.metrics.Waited(time.Since(start), ResultTurn)
		}
		return t, nil
	}
	if wctx == nil {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadlineCause(ctx, end, ErrTimeout)
		defer cancel()
	}
	sh := q.shard(k)
	locking := false
	lock, err := q.locker.Lock(wctx, k, func() {
		sh.mu.Lock()
		l.locking = true
		sh.mu.Unlock()
		locking = true
		q.metrics.Waiting(1)
	})
	if locking {
		sh.mu.Lock()
		l.locking = false
		sh.mu.Unlock()
		q.metrics.Waiting(-1)
		waited = true
	}
	switch {
	case err == nil:
		t.lock = lock
	case ended(wctx) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		// Out of time, or the client left: the next in line may try.
		q.handOff(k, l)
		return nil, q.waitFailed(ctx, wctx, start)
	default:
		// The shared lock is unreachable: the local queue alone keeps the
		// order in this process (DESIGN.md step 6).
		q.metrics.Fallback()
		q.log.Warn("session lock unavailable; the turn runs on the local queue only", "error", err)
	}
	if waited {
		q.metrics.Waited(time.Since(start), ResultTurn)
	}
	return t, nil
}

// waitFailed returns the error of a wait that ended without a turn: the
// caller's context error, or else ErrTimeout (the queue's deadline is the
// only other end of wctx, ctx's child).
func (q *Queue) waitFailed(ctx, wctx context.Context, start time.Time) error {
	d := time.Since(start)
	if err := ctx.Err(); err != nil {
		q.metrics.Waited(d, ResultCanceled)
		return err
	}
	q.metrics.Waited(d, ResultTimeout)
	q.metrics.Rejected(ResultTimeout)
	return ErrTimeout
}

// ended reports whether ctx is done or its deadline has passed (a network
// deadline set from it can fire just before ctx's own timer).
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// handOff ends the current holder's turn of k: the first waiter gets it,
// or, with nobody waiting, the session is removed.
func (q *Queue) handOff(k Key, l *line) {
	sh := q.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(l.waiters) == 0 {
		delete(sh.lines, k)
		return
	}
	w := l.waiters[0]
	l.waiters[0] = nil
	l.waiters = l.waiters[1:]
	l.since = q.now()
	w.granted = true
	close(w.ready)
}

// Sessions returns the number of sessions with a request in flight (held or
// waiting). It is for tests and metrics.
func (q *Queue) Sessions() int {
	n := 0
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.Lock()
		n += len(sh.lines)
		sh.mu.Unlock()
	}
	return n
}

// Held is a session whose turn is held, as [Queue.Oldest] reports it.
type Held struct {
	// Key is the session's key (a hash: no raw session id).
	Key Key
	// Since is when the current holder got the turn.
	Since time.Time
	// Waiting counts the requests waiting behind the holder, the holder
	// itself included while it waits for the shared lock.
	Waiting int
	// Locking reports that the holder still waits for the shared lock.
	Locking bool
}

// Oldest returns at most n of the sessions whose turn is held, the longest
// held first (the operator console's stuck sessions). It locks each shard
// in turn and keeps n entries, whatever the number of sessions: call it
// for the console, not per request.
func (q *Queue) Oldest(n int) []Held {
	if n <= 0 {
		return nil
	}
	out := make([]Held, 0, n)
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.Lock()
		for k, l := range sh.lines {
			if len(out) == n && !l.since.Before(out[n-1].Since) {
				continue
			}
			h := Held{Key: k, Since: l.since, Waiting: l.waiting(), Locking: l.locking}
			j, _ := slices.BinarySearchFunc(out, h, func(a, b Held) int { return a.Since.Compare(b.Since) })
			if len(out) == n {
				out = out[:n-1]
			}
			out = slices.Insert(out, j, h)
		}
		sh.mu.Unlock()
	}
	return out
}
