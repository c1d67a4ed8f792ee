// Package limiter decides, per client, whether a request may pass idemgate's
// rate limits (DESIGN.md steps 1 and 3). It knows nothing of HTTP: the proxy
// package turns a request into a client [Key] with internal/clientaddr and
// [Bucket], asks a [Limiter], and writes the headers from the [Decision].
//
// # Client keys
//
// A client is its TCP peer's address, or, behind trusted proxies, the
// rightmost X-Forwarded-For entry that is not a trusted proxy
// (internal/clientaddr decides it). Clients are counted per IPv4 address
// and per IPv6 /64 ([Bucket]).
//
// # Edge limiter
//
// [NewEdge] gives nginx's "limit_req rate=R burst=B nodelay" exactly: a bucket
// of B+1 requests, refilled at R per second, starting full, so an idle client
// may send B+1 requests at once and then one every 1/R; a refused request uses
// nothing up. The arithmetic is nginx's (an integer level and a last-charged
// time), with the time in nanoseconds instead of milliseconds; on
// whole-millisecond arrivals the decisions are identical to nginx's, and in
// between the limiter is at most one millisecond more permissive. x/time/rate
// is not used: it would need a burst of B+1 to match nginx, its float
// arithmetic is not exact at the boundaries the tests check, and a
// *rate.Limiter per client costs a mutex and about 80 bytes more than the 16
// bytes of state kept here.
//
// # Route limiters
//
// [NewRoute] gives the two route algorithms: [TokenBucket] (Requests tokens,
// refilled evenly over Per) and [Window] (each passed request counts for
// exactly Per; the request that would exceed Requests starts a Block during
// which every request is refused; then the count restarts from zero). Each
// client's state is its own, with timestamps rather than timers: one client's
// block ending changes nothing for any other client, unlike @nestjs/throttler
// 6.0–6.5.
//
// # Time
//
// Every decision takes the current time as a parameter; tests pass a fake
// one. Only differences between times matter.
//
// # Shared state
//
// Package limiter/redislimiter runs the same decisions in Redis, so that all
// replicas share one budget per client. Both kinds of limiter have
// AllowContext and Policy, so that the proxy can hold either behind one
// interface; [DenyCache] is the Redis limiter's local memory of the clients
// Redis refused, and [Policy] is a budget as the IETF RateLimit-Policy header
// states it.
//
// # Memory
//
// A limiter tracks at most MaxClients clients, and drops a client's state
// only once it equals a fresh one, so dropping never gives a limited client its
// budget back early. When a full limiter meets a new client and nothing is
// fresh, it evicts the state closest to fresh and counts it; see [Limiter].
// Measured with 1,000,000 clients on amd64 (BenchmarkMemoryPerClient): about
// 74 bytes per edge or token-bucket client (so about 74 MB at the default
// MaxClients), about 150 bytes per window client plus 8 bytes per counted
// request beyond the first four.
//
// # Busiest clients
//
// [TopK] counts the clients a limiter sees most, for the operator console,
// in a fixed 160 slots (the space-saving algorithm): refusals exactly,
// passed requests sampled one in 32, so that counting a request that passes
// costs one random number nearly always.
package limiter
