package redisstore

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Timeout is the bound on each call of the Redis clients that share it
// (store.redis.timeout), and it can change while they run: a config reload
// sets it, and each call reads it as it starts. It bounds the wait for a
// pooled connection, the dial, the write and the read, as
// [ClientOptions.Timeout] does for a client made without one. Give the same
// Timeout to [ClientOptions.LiveTimeout] and [Options.Timeout], so that the
// store's queued calls wait as long as a call of their own would.
type Timeout struct{ ns atomic.Int64 }

// NewTimeout returns a Timeout of d ([DefaultTimeout] when d <= 0).
func NewTimeout(d time.Duration) *Timeout {
	t := new(Timeout)
	t.Set(d)
	return t
}

// Set makes d the bound of every call that starts from now on
// ([DefaultTimeout] when d <= 0). Calls already running keep theirs.
func (t *Timeout) Set(d time.Duration) {
	if d <= 0 {
		d = DefaultTimeout
	}
	t.ns.Store(int64(d))
}

// Load returns the current bound.
func (t *Timeout) Load() time.Duration { return time.Duration(t.ns.Load()) }

func noCancel() {}

// bound returns ctx with a deadline at most the current bound away. A ctx
// whose deadline is already that near is returned as it is, so that a call
// through two hooked clients (a Cluster and its node) is bounded once.
func (t *Timeout) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	d := t.Load()
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, noCancel
	}
	return context.WithTimeout(ctx, d)
}

// A timeoutHook bounds every dial, command and pipeline of a client by its
// Timeout, through the call's context: with ContextTimeoutEnabled go-redis
// takes a connection's read and write deadlines from the context, and gives
// up waiting for a pooled connection when the context ends; a dial
// ([net.Dialer]) ends with its context too. The client's own read and
// write timeouts are then set to none, and its dial and pool-wait timeouts
// to a backstop (liveDialBackstop), so that the context decides. Pub/Sub
// connections, which go through no hook, wait for messages without a
// deadline, as they do with a fixed timeout.
type timeoutHook struct{ t *Timeout }

func (h timeoutHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		ctx, cancel := h.t.bound(ctx)
		defer cancel()
		return next(ctx, network, addr)
	}
}

func (h timeoutHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, cancel := h.t.bound(ctx)
		defer cancel()
		return next(ctx, cmd)
	}
}

func (h timeoutHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, cancel := h.t.bound(ctx)
		defer cancel()
		return next(ctx, cmds)
	}
}

// hookTimeout adds t's hook to c and, for a Cluster, to each of its node
// clients (they dial, and the Cluster's own state reloads call them
// directly).
func hookTimeout(c redis.UniversalClient, t *Timeout) {
	h := timeoutHook{t}
	c.AddHook(h)
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
	}
}
