package limiter

import "time"

// Decision is a limiter's answer for one request.
//
// When OK is true the request passes, and Limit, Remaining and Reset describe
// the client's budget after it, for the X-RateLimit-* headers. When OK is
// false the request is refused, Remaining is 0, and RetryAfter is how long the
// client must wait before a request can pass; a caller sending Retry-After
// rounds it up to whole seconds.
//
// A disabled limiter answers Decision{OK: true}, with Limit 0.
type Decision struct {
	// OK reports whether the request passes.
	OK bool

	// Limit is the size of the budget: the bucket's capacity (for an edge
	// limiter, burst+1) or the window's request count. It is 0 when the
	// limiter is disabled.
	Limit int

	// Remaining is how many more requests would pass right now, 0 ≤
	// Remaining < Limit after a passed request.
	Remaining int

	// Reset is the time until Remaining next grows: until the next token
	// arrives in a bucket, or until the oldest counted request leaves a
	// window. On a refusal it equals RetryAfter.
	Reset time.Duration

	// RetryAfter is zero when OK is true; otherwise the time until a request
	// can pass again (for a blocked window client, until the block ends).
	RetryAfter time.Duration
}

// Policy is a limiter's budget as the IETF draft's RateLimit-Policy header
// states it (draft-ietf-httpapi-ratelimit-headers-10): Quota requests per
// Window. The zero Policy belongs to a disabled limiter.
//
// For a route limiter it is Requests per Per, for both algorithms. For an
// edge limiter it is Burst+1 requests per the time an emptied bucket takes to
// fill again ((Burst+1)/Rate), which is rarely a whole number of seconds.
type Policy struct {
	// Quota is the number of requests in the budget (the Decision's Limit).
	Quota int

	// Window is the period of the budget.
	Window time.Duration
}
