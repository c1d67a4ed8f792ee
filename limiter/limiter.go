package limiter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// DefaultMaxClients is the number of clients a limiter tracks when its
// options leave MaxClients at 0.
const DefaultMaxClients = 1_000_000

// maxSpan bounds Per and Block (about 36 years), so that no time arithmetic
// can overflow.
const maxSpan = time.Duration(1 << 60)

// ErrInvalidOptions is wrapped by the errors [NewEdge] and [NewRoute] return
// for options they cannot honour.
var ErrInvalidOptions = errors.New("limiter: invalid options")

func errOptions(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...)
}

// Algorithm names a route limiter's algorithm, as spelled in the config file.
type Algorithm string

const (
	// TokenBucket gives each client a bucket of Requests tokens, refilled
	// evenly over Per (one token every Per/Requests); a request takes one
	// token and is refused when none is left. It is the default.
	TokenBucket Algorithm = "token_bucket"

	// Window counts each passed request for exactly Per (a sliding log, not
	// fixed windows). The request that would exceed Requests is refused and
	// starts a block of Block, during which every request is refused; the
	// count restarts from zero when the block ends.
	Window Algorithm = "window"
)

// EdgeOptions configures an edge limiter: nginx's
// "limit_req rate=Rate r/s burst=Burst nodelay", per client key.
type EdgeOptions struct {
	// Rate is the sustained rate in requests per Per per client. 0
	// disables the limiter: every request passes and nothing is tracked.
	Rate int

	// Per is the period of Rate; 0 means one second. A rate that is not a
	// whole number per second is written as a whole number per a longer
	// period: 0.5 r/s as Rate 1, Per 2s (nginx's "30r/m" as Rate 30, Per 1m).
	Per time.Duration

	// Burst is how many requests above the rate a client may send at once,
	// as nginx's burst: an idle client may send Burst+1 requests at once,
	// then one every 1/Rate. Must be ≥ 0.
	Burst int

	// MaxClients bounds the number of clients tracked; 0 means
	// [DefaultMaxClients]. See [Limiter] for what happens when it is reached.
	MaxClients int

	// SweepInterval, when positive, starts a goroutine that drops fresh
	// states (see [Limiter.Sweep]) at that interval until [Limiter.Close].
	// 0 starts no goroutine; memory stays bounded by MaxClients either way.
	SweepInterval time.Duration
}

// RouteOptions configures a route limiter: Requests per Per, per client key.
type RouteOptions struct {
	// Algorithm is [TokenBucket] (the default, also when "") or [Window].
	Algorithm Algorithm

	// Requests is the budget per Per. Must be ≥ 1.
	Requests int

	// Per is the period of the budget. Must be positive.
	Per time.Duration

	// Block is how long a [Window] client is refused after it exceeded
	// Requests; 0 means Per. The token bucket ignores it.
	Block time.Duration

	// MaxClients bounds the number of clients tracked; 0 means
	// [DefaultMaxClients]. See [Limiter] for what happens when it is reached.
	MaxClients int

	// SweepInterval is as in [EdgeOptions].
	SweepInterval time.Duration
}

// Limiter decides, per client key, whether a request passes. Make one with
// [NewEdge] or [NewRoute]. The zero Limiter is disabled: it passes every
// request with Decision{OK: true} and tracks nothing.
//
// A Limiter is safe for concurrent use. Its state is split into shards, each
// under its own mutex, and a decision for a client already tracked allocates
// nothing.
//
// Time is passed in: every call takes now, and the limiter itself reads no
// clock except to start an optional sweeper. Only differences between the
// times passed matter; times taken from [time.Now] carry a monotonic reading,
// which makes the limiter immune to wall-clock steps. A now earlier than an
// earlier call's (two goroutines racing to a shard) counts as no time passed.
//
// Memory is bounded: at most MaxClients clients are tracked, about 74 bytes
// each for a bucket and 150 bytes plus 8 per counted request for a window
// (BenchmarkMemoryPerClient, amd64). A client's state is dropped only when it
// equals a fresh one (an empty bucket, an empty window without a block), so
// dropping it changes no decision. The clients are split into shards of about
// 256, each holding its share of MaxClients; when a client not yet tracked
// arrives and its shard is full, the limiter drops every fresh state in that
// shard. Only if there is none does it evict a state that is not fresh: the one
// closest to becoming fresh (exactly when the shard had to be scanned anyway,
// otherwise the closest of 8 states drawn at random, as Redis does), counted
// by [Limiter.Evictions]. Because shards fill unevenly, evictions may begin a
// few percent before MaxClients clients are tracked.
//
// An evicted client starts afresh, so it may get early the part of its budget
// that would have come back by the time it was fresh: the limiter fails open
// for that one client, and never for anyone else. This is chosen over refusing
// unknown clients when full, which would let anyone with many addresses lock
// every new client out, and over nginx's least-recently-used eviction, which
// resets a saturated client after a flood of one-request addresses: here those
// are the states closest to fresh, so the saturated client stays limited. A
// client with many addresses gains little, since each of its addresses has its
// own budget anyway. Evictions should stay at zero; a rising count means
// MaxClients is too small for the traffic, or a flood.
type Limiter struct {
	bucket *gcra     // non-nil for the edge and token_bucket limiters
	window *window   // non-nil for window limiters
	tab    tableOps  // bucket's or window's table; nil when disabled
	epoch  time.Time // origin of the time base, see nanos
	policy Policy
}

// tableOps is what a Limiter needs of a table beyond decisions.
type tableOps interface {
	len() int
	sweep(now int64) int
	evicted() uint64
	close()
	startSweeper(interval time.Duration, now func(time.Time) int64)
}

// NewEdge returns an edge limiter with nginx limit_req nodelay semantics: a
// token bucket of capacity Burst+1, refilled at Rate per second, starting
// full; a refused request uses nothing up. Decisions carry Limit = Burst+1.
// With Rate 0 it returns a disabled Limiter.
func NewEdge(o EdgeOptions) (*Limiter, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Rate == 0 {
		return &Limiter{}, nil
	}
	g, err := newGCRA(o.Rate, cmp.Or(o.Per, time.Second), o.Burst+1, maxClients(o.MaxClients))
	if err != nil {
		return nil, err
	}
	l := &Limiter{bucket: g, tab: g.tab, epoch: time.Now(), policy: EdgePolicy(o)}
	l.startSweeper(o.SweepInterval)
	return l, nil
}

// Validate returns the error, wrapping [ErrInvalidOptions], that [NewEdge]
// returns for o, without building a limiter (limiter/redislimiter checks
// its options with it).
func (o EdgeOptions) Validate() error {
	switch {
	case o.Rate < 0:
		return errOptions("edge rate %d is negative", o.Rate)
	case o.Burst < 0:
		return errOptions("edge burst %d is negative", o.Burst)
	case o.MaxClients < 0:
		return errOptions("max clients %d is negative", o.MaxClients)
	case o.SweepInterval < 0:
		return errOptions("sweep interval %v is negative", o.SweepInterval)
	case o.Per < 0 || o.Per > maxSpan:
		return errOptions("per %v is not in [0, %v]", o.Per, maxSpan)
	case o.Rate == 0:
		return nil
	}
	_, _, err := gcraUnits(o.Rate, cmp.Or(o.Per, time.Second), o.Burst+1)
	return err
}

// NewRoute returns a route limiter of Requests per Per with o.Algorithm.
// Decisions carry Limit = Requests.
func NewRoute(o RouteOptions) (*Limiter, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{epoch: time.Now(), policy: Policy{Quota: o.Requests, Window: o.Per}}
	if o.Algorithm == Window {
		block := o.Block
		if block == 0 {
			block = o.Per
		}
		l.window = newWindow(o.Requests, o.Per, block, maxClients(o.MaxClients))
		l.tab = l.window.tab
	} else {
		g, err := newGCRA(o.Requests, o.Per, o.Requests, maxClients(o.MaxClients))
		if err != nil {
			return nil, err
		}
		l.bucket, l.tab = g, g.tab
	}
	l.startSweeper(o.SweepInterval)
	return l, nil
}

// Validate returns the error, wrapping [ErrInvalidOptions], that [NewRoute]
// returns for o, without building a limiter (limiter/redislimiter checks
// its options with it).
func (o RouteOptions) Validate() error {
	switch {
	case o.Algorithm != "" && o.Algorithm != TokenBucket && o.Algorithm != Window:
		return errOptions("unknown algorithm %q", o.Algorithm)
	case o.Requests < 1:
		return errOptions("requests %d is less than 1", o.Requests)
	case o.Per <= 0 || o.Per > maxSpan:
		return errOptions("per %v is not in (0, %v]", o.Per, maxSpan)
	case o.Block < 0 || o.Block > maxSpan:
		return errOptions("block %v is not in [0, %v]", o.Block, maxSpan)
	case o.MaxClients < 0:
		return errOptions("max clients %d is negative", o.MaxClients)
	case o.SweepInterval < 0:
		return errOptions("sweep interval %v is negative", o.SweepInterval)
	case o.Algorithm == Window:
		return nil
	}
	_, _, err := gcraUnits(o.Requests, o.Per, o.Requests)
	return err
}

func (l *Limiter) startSweeper(interval time.Duration) {
	if interval > 0 {
		l.tab.startSweeper(interval, l.nanos)
	}
}

func maxClients(n int) int {
	if n == 0 {
		return DefaultMaxClients
	}
	return n
}

// Allow decides whether a request from the client k at time now passes, and
// counts it when it does. A refused request changes nothing.
func (l *Limiter) Allow(k Key, now time.Time) Decision {
	switch {
	case l.bucket != nil:
		return l.bucket.allow(k, l.nanos(now))
	case l.window != nil:
		return l.window.allow(k, l.nanos(now))
	}
	return Decision{OK: true}
}

// AllowContext is [Limiter.Allow] with the signature of a limiter whose
// state lives elsewhere (the Redis limiter), so that callers can hold either
// behind one interface. ctx is unused: a local decision does no I/O.
func (l *Limiter) AllowContext(_ context.Context, k Key, now time.Time) Decision {
	return l.Allow(k, now)
}

// Policy returns the limiter's budget: Requests per Per for a route
// limiter, Burst+1 per (Burst+1)/Rate for an edge limiter, and the zero
// Policy for a disabled one.
func (l *Limiter) Policy() Policy { return l.policy }

// EdgePolicy returns the [Policy] of an edge limiter with options o: Burst+1
// requests per the time an emptied bucket takes to fill again. It is the
// zero Policy when o.Rate is 0.
func EdgePolicy(o EdgeOptions) Policy {
	if o.Rate <= 0 {
		return Policy{}
	}
	per := o.Per
	if per == 0 {
		per = time.Second
	}
	capacity := o.Burst + 1
	// Informational only (no decision depends on it), so float arithmetic
	// is fine; it is capped rather than overflowing.
	w := math.Ceil(float64(per) / float64(o.Rate) * float64(capacity))
	return Policy{Quota: capacity, Window: time.Duration(min(w, float64(maxSpan)))}
}

// nanos converts now into the limiter's time base: nanoseconds since the
// limiter was made, clamped to ±2⁶² so that no arithmetic overflows.
func (l *Limiter) nanos(now time.Time) int64 {
	return min(max(int64(now.Sub(l.epoch)), -1<<62), 1<<62)
}

// Len returns the number of clients tracked, at most MaxClients. It locks
// every shard in turn: call it for metrics, not per request.
func (l *Limiter) Len() int {
	if l.tab == nil {
		return 0
	}
	return l.tab.len()
}

// Evictions returns how many times the limiter has dropped a client's state
// that was not yet fresh, to make room for a new client (see [Limiter]). The
// count only grows; export it as a counter.
func (l *Limiter) Evictions() uint64 {
	if l.tab == nil {
		return 0
	}
	return l.tab.evicted()
}

// Sweep drops every client state that is fresh at now (it changes no
// decision) and returns how many it dropped. Full shards do this by
// themselves when a new client arrives; Sweep keeps [Limiter.Len] close to the
// number of clients that are actually limited. It holds each shard's lock
// while it scans that shard.
func (l *Limiter) Sweep(now time.Time) int {
	if l.tab == nil {
		return 0
	}
	return l.tab.sweep(l.nanos(now))
}

// Close stops the sweeper goroutine, if one was started, and waits for it to
// return. It is idempotent and always returns nil. The limiter still answers
// after Close.
func (l *Limiter) Close() error {
	if l.tab != nil {
		l.tab.close()
	}
	return nil
}
