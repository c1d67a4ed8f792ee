// Package redislimiter keeps the state of package limiter's limiters in
// Redis, so that every replica of the proxy shares one budget per client
// (limiter.backend: redis).
//
// # Decisions
//
// The decisions are package limiter's, exactly: the edge limiter is nginx's
// limit_req arithmetic (an idle client may send Burst+1 at once), the route
// limiters are the token bucket and the sliding window with a block. Each
// decision is one EVALSHA of a Lua script (redis.NewScript), so it is atomic
// however many replicas ask at once. The scripts read the time with Redis's
// TIME: Redis's clock is the only clock, and the replicas' clocks may
// disagree freely. Times are in microseconds (package limiter counts
// nanoseconds; on whole-microsecond times the two agree exactly).
//
// # Keys
//
// A client's state is at KeyPrefix + "rl:" + the limiter's name + "{" + a
// hash of the client's address block + "}" (a window limiter adds a second
// key, the same name with ":b", for its block). The braces are a Cluster
// hash tag: a decision touches one slot, and clients spread over all slots.
// The hash is SHA-256 over the block's 16 bytes, so no address appears in
// Redis. Every key expires when its state equals a fresh one, so idle
// clients cost nothing and an expired key changes no decision.
//
// # Deny cache
//
// A client that Redis refused is refused locally, without a round trip,
// until its RetryAfter has passed ([limiter.DenyCache]): Redis would refuse
// it until then anyway. A flood from one client therefore costs Redis one
// call per RetryAfter per replica.
//
// # Failure
//
// When Redis cannot answer (down, slow beyond the client's timeout, or
// failing), the request passes, unlimited by that limiter: the limiter fails
// open, because refusing every request while Redis is down would take the
// whole API down with it. Such a decision has Limit 0 (so the proxy sends no
// X-RateLimit-* headers), is counted ([Limiter.Fallbacks],
// [Backend.Fallbacks]) and logged at most once a minute per [Backend]. After
// a failure, the limiters of the Backend do not ask Redis again for
// RetryInterval (default one second), except for one request at a time that
// probes it, so a Redis that hangs costs at most one timeout per interval,
// not one per request. The call never waits longer than the go-redis
// client's own timeouts (keystore/redisstore.NewClient sets them all), and
// it is not cut short when the client hangs up, so every passed request is
// counted.
package redislimiter
