package redislimiter

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/rediskey"
	"github.com/idemgate/idemgate/limiter"
)

// DefaultKeyPrefix is the key prefix used when [Options.KeyPrefix] is empty;
// it is store.redis.key_prefix's default.
const DefaultKeyPrefix = rediskey.DefaultPrefix

// DefaultRetryInterval is [Options.RetryInterval] when it is zero.
const DefaultRetryInterval = time.Second

// logInterval is the least time between two logs of Redis being unavailable.
const logInterval = time.Minute

// Attribute keys of the log lines.
const (
	attrLimiter   = "limiter"
	attrError     = "error"
	attrFallbacks = "fallbacks_total"
)

// redisUp is Backend.downUntil while Redis answers; neverLogged is
// Backend.lastLog before the first log.
const (
	redisUp     = math.MinInt64
	neverLogged = math.MinInt64
)

// maxExact bounds every number the scripts compute, so that Lua's doubles
// hold them exactly (see scripts.go).
const maxExact = 1 << 52

// Options configure a [Backend]. The zero value is usable.
type Options struct {
	// KeyPrefix starts every key the limiters write, followed by "rl:".
	// Default [DefaultKeyPrefix]. It must not contain '{' or '}': the
	// client's hash tag follows it.
	KeyPrefix string

	// Logger receives the line, at most once a minute, saying that Redis
	// could not be reached and requests pass unlimited, and the line saying
	// that it can be again. Default: discard.
	Logger *slog.Logger

	// RetryInterval is how long, after Redis failed to answer, the limiters
	// let requests pass without asking it, except for one request at a time
	// that probes it. Default [DefaultRetryInterval]; it must not be
	// negative.
	RetryInterval time.Duration
}

// Backend holds what the limiters sharing one Redis share: the client, the
// key prefix, the count of fallbacks, and whether Redis is down. Make one
// with [New] and the limiters with [Backend.NewEdge] and [Backend.NewRoute].
// It is safe for concurrent use.
type Backend struct {
	client redis.UniversalClient
	prefix string
	log    *slog.Logger
	retry  int64     // ns
	epoch  time.Time // origin of the times below

	fallbacks atomic.Uint64
	downUntil atomic.Int64 // ns since epoch until which Redis is not asked; redisUp: up
	lastLog   atomic.Int64 // ns since epoch of the last unavailability log; neverLogged: none
	reported  atomic.Bool  // an unavailability was logged and no recovery since

	// clock, when set (tests only, see export_test.go), gives the scripts
	// the time in microseconds instead of Redis's TIME.
	clock func() int64
}

// New returns a Backend whose limiters keep their state in client. The
// caller owns client and closes it after every limiter; build it with
// keystore/redisstore.NewClient, whose timeouts bound every decision. New
// does not contact Redis: limiters made while Redis is down pass requests
// until it is back.
func New(client redis.UniversalClient, o Options) (*Backend, error) {
	if err := rediskey.Check("redislimiter", client, &o.KeyPrefix); err != nil {
		return nil, err
	}
	if o.RetryInterval < 0 {
		return nil, fmt.Errorf("redislimiter: retry interval %v is negative", o.RetryInterval)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = DefaultRetryInterval
	}
	b := &Backend{
		client: client,
		prefix: o.KeyPrefix,
		log:    o.Logger,
		retry:  int64(o.RetryInterval),
		epoch:  time.Now(),
	}
	b.downUntil.Store(redisUp)
	b.lastLog.Store(neverLogged)
	return b, nil
}

// Fallbacks returns how many requests the Backend's limiters let pass
// because Redis could not decide. The count only grows; export it as a
// counter.
func (b *Backend) Fallbacks() uint64 { return b.fallbacks.Load() }

func (b *Backend) nanos(now time.Time) int64 {
	return min(max(int64(now.Sub(b.epoch)), -1<<62), 1<<62)
}

// mayAsk reports whether a decision at t may ask Redis: always while Redis
// is up; while it is down, only one caller per RetryInterval, the probe.
func (b *Backend) mayAsk(t int64) bool {
	until := b.downUntil.Load()
	return until == redisUp || (t >= until && b.downUntil.CompareAndSwap(until, t+b.retry))
}

// answered records that Redis answered.
func (b *Backend) answered() {
	if b.downUntil.Load() != redisUp {
		b.downUntil.Store(redisUp)
	}
	if b.reported.Load() && b.reported.CompareAndSwap(true, false) {
		b.log.Info("rate limiter: Redis answers again; the Redis limiters limit again",
			attrFallbacks, b.fallbacks.Load())
	}
}

// failed records that Redis did not answer a decision of l at t (err is nil
// when the decision did not ask, because Redis is known to be down).
func (b *Backend) failed(l *Limiter, t int64, err error) {
	l.fallbacks.Add(1)
	n := b.fallbacks.Add(1)
	if err == nil {
		return
	}
	b.downUntil.Store(t + b.retry)
	last := b.lastLog.Load()
	if last != neverLogged && t-last < int64(logInterval) {
		return
	}
	if !b.lastLog.CompareAndSwap(last, t) {
		return // another caller logs
	}
	b.reported.Store(true)
	b.log.Warn("rate limiter: Redis unavailable; requests pass unlimited by the Redis limiters (logged at most once a minute)",
		attrLimiter, l.name, attrError, err.Error(), attrFallbacks, n)
}

// Limiter is one limiter (the edge limit, or one route's limit) with its
// state in Redis. It is safe for concurrent use. Make one with
// [Backend.NewEdge] or [Backend.NewRoute]; the zero Limiter is not usable.
//
// Besides Redis it keeps a [limiter.DenyCache] of the clients Redis refused,
// bounded by the options' MaxClients.
type Limiter struct {
	b         *Backend
	name      string
	keyPrefix string // b.prefix + "rl:" + name + "{"
	script    *redis.Script
	args      []any // the script's ARGV after the time
	window    bool  // a window limiter: two keys
	limit     int
	policy    limiter.Policy
	deny      *limiter.DenyCache // nil when disabled
	fallbacks atomic.Uint64
}

// NewEdge returns an edge limiter named name (its keys' middle part; for
// example "edge") with the semantics of [limiter.NewEdge]. o.MaxClients
// bounds the deny cache and o.SweepInterval sweeps it. With o.Rate 0 the
// limiter is disabled: it passes every request and never asks Redis. o.Per
// must be a whole number of microseconds.
func (b *Backend) NewEdge(name string, o limiter.EdgeOptions) (*Limiter, error) {
	if err := cmp.Or(o.Validate(), checkName(name)); err != nil {
		return nil, err
	}
	if o.Rate == 0 {
		return &Limiter{b: b, name: name}, nil
	}
	per := o.Per
	if per == 0 {
		per = time.Second
	}
	l, err := b.newBucket(name, o.Rate, per, o.Burst+1)
	if err != nil {
		return nil, err
	}
	l.policy = limiter.EdgePolicy(o)
	return l, l.startDenyCache(o.MaxClients, o.SweepInterval)
}

// NewRoute returns a route limiter named name (for example
// "route:create_cart") with the semantics of [limiter.NewRoute]. o.MaxClients
// bounds the deny cache and o.SweepInterval sweeps it. o.Per and o.Block must
// be whole numbers of microseconds.
func (b *Backend) NewRoute(name string, o limiter.RouteOptions) (*Limiter, error) {
	if err := cmp.Or(o.Validate(), checkName(name)); err != nil {
		return nil, err
	}
	var l *Limiter
	if o.Algorithm == limiter.Window {
		block := o.Block
		if block == 0 {
			block = o.Per
		}
		perUs, err := micros("per", o.Per)
		if err != nil {
			return nil, err
		}
		blockUs, err := micros("block", block)
		if err != nil {
			return nil, err
		}
		l = &Limiter{
			b: b, name: name, keyPrefix: b.prefix + "rl:" + name + "{",
			script: windowScript, window: true, limit: o.Requests,
			args: []any{strconv.Itoa(o.Requests), strconv.FormatInt(perUs, 10), strconv.FormatInt(blockUs, 10)},
		}
	} else {
		var err error
		if l, err = b.newBucket(name, o.Requests, o.Per, o.Requests); err != nil {
			return nil, err
		}
	}
	l.policy = limiter.Policy{Quota: o.Requests, Window: o.Per}
	return l, l.startDenyCache(o.MaxClients, o.SweepInterval)
}

// newBucket returns a GCRA limiter of rate requests per per, holding
// capacity, in the units the script counts in.
func (b *Backend) newBucket(name string, rate int, per time.Duration, capacity int) (*Limiter, error) {
	perUs, err := micros("per", per)
	if err != nil {
		return nil, err
	}
	g := gcd(int64(rate), perUs)
	unit, drain := perUs/g, int64(rate)/g
	if int64(capacity) >= maxExact/unit-1 {
		return nil, fmt.Errorf("%w: capacity %d is too large for one request per %v in Redis", limiter.ErrInvalidOptions, capacity, per/time.Duration(rate))
	}
	return &Limiter{
		b: b, name: name, keyPrefix: b.prefix + "rl:" + name + "{",
		script: gcraScript, limit: capacity,
		args: []any{
			strconv.FormatInt(unit, 10), strconv.FormatInt(drain, 10),
			strconv.FormatInt(int64(capacity)*unit, 10), strconv.Itoa(capacity),
		},
	}, nil
}

func (l *Limiter) startDenyCache(maxClients int, sweep time.Duration) error {
	var err error
	l.deny, err = limiter.NewDenyCache(maxClients, sweep)
	return err
}

func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, "{}") {
		return fmt.Errorf("%w: limiter name %q is empty or contains '{' or '}'", limiter.ErrInvalidOptions, name)
	}
	return nil
}

func micros(what string, d time.Duration) (int64, error) {
	if d%time.Microsecond != 0 || d/time.Microsecond >= maxExact/4 {
		return 0, fmt.Errorf("%w: %s %v is not a whole number of microseconds below 2^50", limiter.ErrInvalidOptions, what, d)
	}
	return int64(d / time.Microsecond), nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Name returns the limiter's name, as given to its constructor.
func (l *Limiter) Name() string { return l.name }

// Policy returns the limiter's budget, as [limiter.Limiter.Policy] does.
func (l *Limiter) Policy() limiter.Policy { return l.policy }

// Fallbacks returns how many requests this limiter let pass because Redis
// could not decide. The count only grows.
func (l *Limiter) Fallbacks() uint64 { return l.fallbacks.Load() }

// AllowContext decides whether a request from the client k passes, and
// counts it in Redis when it does. now is the local clock, used only for the
// deny cache and for the Backend's retry interval; the decision itself uses
// Redis's TIME.
//
// It never fails: when Redis cannot decide, the request passes with
// Decision{OK: true} (Limit 0) and the fallback is counted. ctx's values are
// kept but its cancellation is not: a decision, bounded by the client's
// timeouts, runs to its end even when the request's client hung up, so that
// a request that goes on is always counted.
func (l *Limiter) AllowContext(ctx context.Context, k limiter.Key, now time.Time) limiter.Decision {
	if l.deny == nil {
		return limiter.Decision{OK: true}
	}
	if wait, denied := l.deny.Denied(k, now); denied {
		return limiter.Decision{Limit: l.limit, Reset: wait, RetryAfter: wait}
	}
	t := l.b.nanos(now)
	if !l.b.mayAsk(t) {
		l.b.failed(l, t, nil)
		return limiter.Decision{OK: true}
	}
	d, err := l.ask(context.WithoutCancel(ctx), k)
	if err != nil {
		l.b.failed(l, t, err)
		return limiter.Decision{OK: true}
	}
	l.b.answered()
	if !d.OK {
		l.deny.Deny(k, now, d.RetryAfter)
	}
	return d
}

// ask runs the limiter's script for k.
func (l *Limiter) ask(ctx context.Context, k limiter.Key) (limiter.Decision, error) {
	key := l.key(k)
	var keys []string
	if l.window {
		keys = []string{key, key + ":b"}
	} else {
		keys = []string{key}
	}
	args := make([]any, 0, 1+len(l.args))
	now := ""
	if l.b.clock != nil {
		now = strconv.FormatInt(l.b.clock(), 10)
	}
	args = append(append(args, now), l.args...)
	v, err := l.script.Run(ctx, l.b.client, keys, args...).Int64Slice()
	if err != nil {
		return limiter.Decision{}, fmt.Errorf("redislimiter: %s: %w", l.name, err)
	}
	if len(v) != 4 || v[0] != codeOK && v[0] != codeRefused || v[1] < 0 || v[1] > int64(l.limit) || v[2] < 0 || v[3] < 0 {
		return limiter.Decision{}, fmt.Errorf("redislimiter: %s: unexpected reply %v", l.name, v)
	}
	return limiter.Decision{
		OK:         v[0] == codeOK,
		Limit:      l.limit,
		Remaining:  int(v[1]),
		Reset:      microDuration(v[2]),
		RetryAfter: microDuration(v[3]),
	}, nil
}

func microDuration(us int64) time.Duration {
	return time.Duration(min(us, math.MaxInt64/int64(time.Microsecond))) * time.Microsecond
}

// key returns the Redis key of k's state: the limiter's prefix, then the
// first 16 bytes of SHA-256 over k's bytes in hex, as the hash tag.
func (l *Limiter) key(k limiter.Key) string {
	b := k.As16()
	sum := sha256.Sum256(b[:])
	buf := make([]byte, 0, len(l.keyPrefix)+2*16+1)
	buf = append(buf, l.keyPrefix...)
	buf = hex.AppendEncode(buf, sum[:16])
	buf = append(buf, '}')
	return string(buf)
}

// Close stops the deny cache's sweeper, if one was started, and waits for
// it. It is idempotent and returns nil. It does not close the Redis client.
func (l *Limiter) Close() error {
	if l.deny != nil {
		l.deny.Close()
	}
	return nil
}
