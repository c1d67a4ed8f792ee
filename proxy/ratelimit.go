package proxy

import (
	"net/http"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/limiter"
)

// EdgeLimit returns DESIGN.md step 1: every request, matched or not, is
// counted against its client address's bucket in l. A refused request gets
// 429 rate_limited with Retry-After and never reaches a later stage. now is
// the clock (time.Now in production).
func EdgeLimit(l *limiter.Limiter, now func() time.Time) Middleware {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d := l.Allow(limiter.Bucket(ClientAddr(r)), now())
			if !d.OK {
				WriteProblem(w, r, ProblemRateLimited.WithRetryAfter(ceilSeconds(d.RetryAfter)))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// RouteLimit returns DESIGN.md step 3: requests on a route with a limiter in
// limits (by route name) are counted per client address and route. Passed
// answers, replays included, carry X-RateLimit-Limit, -Remaining and -Reset;
// a refusal gets 429 rate_limited with Retry-After. A refusal happens before
// the key check, so it never claims or releases a key.
func RouteLimit(limits map[string]*limiter.Limiter, now func() time.Time) Middleware {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			l := limits[RouteName(r)]
			if l == nil {
				next.ServeHTTP(w, r)
				return
			}
			d := l.Allow(limiter.Bucket(ClientAddr(r)), now())
			if !d.OK {
				WriteProblem(w, r, ProblemRateLimited.WithRetryAfter(ceilSeconds(d.RetryAfter)))
				return
			}
			h := w.Header()
			h.Set("X-RateLimit-Limit", strconv.Itoa(d.Limit))
			h.Set("X-RateLimit-Remaining", strconv.Itoa(d.Remaining))
			h.Set("X-RateLimit-Reset", strconv.Itoa(ceilSeconds(d.Reset)))
			next.ServeHTTP(w, r)
		})
	}
}

// ceilSeconds rounds d up to whole seconds, at least 1 for any wait.
func ceilSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return max(1, int((d+time.Second-1)/time.Second))
}
