// Package session runs requests one at a time per session (a cart, a
// checkout, an order), in arrival order: DESIGN.md step 6.
//
// # Turns in one process
//
// A [Queue] keeps, per session [Key], one holder of the turn and a FIFO line
// of at most [Options.QueueDepth] waiters behind it. [Queue.Acquire] either
// takes the turn at once, joins the line, or fails with [ErrQueueFull]; a
// waiter that is not handed the turn within [Options.QueueTimeout] fails
// with [ErrTimeout], and one whose context ends leaves the line. [Turn.End]
// hands the turn straight to the first waiter (no re-contention, so arrival
// order is kept: Go's sync.Mutex is not FIFO, see the research notes §7.3),
// or, with nobody waiting, removes the session's entry. Memory is therefore
// bounded by the sessions with a request in flight, never by the number of
// session ids ever seen.
//
// # Turns across processes
//
// With a [Locker] (package redislock), the holder of a local turn must also
// take the session's shared lease lock before it runs. While it waits for
// that lock it counts as one of the waiters. If the Locker fails for any
// reason other than the request's own context, the turn runs on the local
// queue alone and [Metrics.Fallback] counts it: a store outage degrades
// sessions to per-process order instead of refusing traffic.
//
// # Keys
//
// A session's [Key] is a SHA-256 over its scope (the proxy uses the tenant,
// where the route names the session, and the id as sent), so raw client input
// never becomes a lock name.
package session
