package redislimiter

// UseClock makes b's scripts take the time from clock, in microseconds,
// instead of Redis's TIME, so that tests can check exact numbers against a
// real Redis. Call it before b's limiters decide anything.
func UseClock(b *Backend, clock func() int64) { b.clock = clock }

// KeyPrefix returns b's key prefix.
func KeyPrefix(b *Backend) string { return b.prefix }
