package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/limiter"
)

// Limiter is what the limit stages ask about each request. Both
// *limiter.Limiter (state in this process) and *redislimiter.Limiter (state
// in Redis, shared by every replica) satisfy it.
type Limiter interface {
	// AllowContext decides whether a request from the client k at now
	// passes, and counts it when it does. It never fails: a limiter that
	// cannot decide (its Redis is down) lets the request pass with Limit 0,
	// and the stages then send no limit headers. ctx carries the request's
	// values; any wait is bounded by the limiter itself.
	AllowContext(ctx context.Context, k limiter.Key, now time.Time) limiter.Decision

	// Policy is the limiter's budget, for the IETF RateLimit-Policy header.
	Policy() limiter.Policy
}

var _ Limiter = (*limiter.Limiter)(nil)

// limitOptions configure the limit stages of DESIGN.md steps 1 and 3. Every
// field is optional.
type limitOptions struct {
	// Edge counts every request, matched or not, per client address.
	// Nil: no edge limit.
	Edge Limiter

	// Routes count the requests of a route per client address, by route
	// name. A route without an entry is not limited.
	Routes map[string]Limiter

	// By is what each route's limit counts by; a route without an entry
	// counts per client address.
	By map[string]identity.By

	// Identity resolves a request's identity for a limit by identity
	// (identity.go's identityOf: resolved once per request). Required when
	// By names identity.
	Identity func(*http.Request) identity.Result

	// Now is the clock passed to the limiters. Required ([New] defaults
	// Deps.Now).
	Now func() time.Time

	// IETFHeaders adds the IETF draft's RateLimit-Policy and RateLimit
	// headers (draft-ietf-httpapi-ratelimit-headers-10, Structured Fields
	// with the route's name as the policy name) to route-limited answers,
	// 429s included, next to X-RateLimit-*.
	IETFHeaders bool

	// TrustedProxies are the proxies whose X-Forwarded-For is believed
	// (Options.TrustedProxies). When there are none and a request comes from
	// a loopback or private address, the stages log a warning once: behind a
	// proxy or a mesh, every client then has the same address and shares one
	// budget.
	TrustedProxies []netip.Prefix

	// Logger receives that warning. Required ([New] defaults Deps.Logger).
	Logger *slog.Logger
}

// limits holds the edge and route limit stages, built by [newLimits].
type limits struct {
	edge     Limiter
	routes   map[string]*routeLimit
	now      func() time.Time
	log      *slog.Logger
	identity func(*http.Request) identity.Result
	// warn is set while a request from a loopback or private peer would
	// still deserve the shared-budget warning: no trusted proxies and no
	// warning yet.
	warn atomic.Bool
}

// routeLimit is one route's limiter and its header values that never change.
type routeLimit struct {
	l      Limiter
	name   string
	by     identity.By
	policy []string // the RateLimit-Policy value; nil without IETF headers
	sfName string   // the route's name as a Structured Fields String
}

// newLimits builds the limit stages of st, on the proxy's clock, logger and
// trusted proxies; route limits by identity resolve it with id.
func newLimits(pol Policy, d Deps, id func(*http.Request) identity.Result) (*limits, error) {
	return newLimitStages(limitOptions{
		Edge:           pol.Edge,
		Routes:         pol.RouteLimits,
		By:             pol.RouteBy,
		Identity:       id,
		Now:            d.Now,
		IETFHeaders:    pol.IETFHeaders,
		TrustedProxies: pol.TrustedProxies,
		// The proxy's logger names its component already (the wiring's
		// "component": "proxy"); a second "component" would repeat the key.
		Logger: d.Logger.With("stage", "limit"),
	})
}

// newLimitStages checks o and builds the limit stages.
func newLimitStages(o limitOptions) (*limits, error) {
	l := &limits{
		edge:     o.Edge,
		routes:   make(map[string]*routeLimit, len(o.Routes)),
		now:      o.Now,
		log:      o.Logger,
		identity: o.Identity,
	}
	var errs []error
	for name := range o.By {
		if o.Routes[name] == nil {
			errs = append(errs, fmt.Errorf("proxy: route %q: by %s without a limiter", name, o.By[name]))
		}
	}
	for name, lim := range o.Routes {
		if lim == nil {
			errs = append(errs, fmt.Errorf("proxy: route %q: nil limiter", name))
			continue
		}
		r := &routeLimit{l: lim, name: name, by: o.By[name], sfName: sfString(name)}
		if r.by.IsIdentity() && o.Identity == nil {
			errs = append(errs, fmt.Errorf("proxy: route %q: a limit by identity needs an identity resolver", name))
			continue
		}
		if p := lim.Policy(); o.IETFHeaders && p.Quota > 0 {
			r.policy = []string{r.sfName + ";q=" + strconv.Itoa(p.Quota) + ";w=" + strconv.Itoa(max(1, ceilSeconds(p.Window)))}
		}
		l.routes[name] = r
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	l.warn.Store(len(o.TrustedProxies) == 0)
	return l, nil
}

// edgeStage returns DESIGN.md step 1: every request, matched or not, is counted
// against its client address's budget. A refused request gets 429
// rate_limited with Retry-After and never reaches a later stage. Edge
// answers carry no limit headers. It returns nil without an edge limiter.
func (l *limits) edgeStage() middleware {
	if l.edge == nil {
		return nil
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			client := clientAddr(r)
			l.checkShared(client)
			d := l.edge.AllowContext(r.Context(), limiter.Bucket(client), l.now())
			if !d.OK {
				writeProblem(w, r, problemRateLimited.withRetryAfter(ceilSeconds(d.RetryAfter)))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// routeStage returns DESIGN.md step 3: requests on a route with a limiter are
// counted per client address and route. Passed answers, replays and the
// proxy's own answers included, carry X-RateLimit-Limit, -Remaining and
// -Reset (and, with IETFHeaders, RateLimit-Policy and RateLimit); they are
// this request's, replacing any the upstream or a stored answer had. A
// refusal gets 429 rate_limited with Retry-After (and the IETF headers with
// r=0), and happens before the key check, so it never claims or releases a
// key. A decision with Limit 0 (a limiter that could not decide) adds no
// headers. It returns nil without route limiters.
func (l *limits) routeStage() middleware {
	if len(l.routes) == 0 {
		return nil
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			lim := l.routes[routeName(r)]
			if lim == nil {
				next.ServeHTTP(w, r)
				return
			}
			client := clientAddr(r)
			l.checkShared(client)
			d := lim.l.AllowContext(r.Context(), l.keyOf(lim, r, client), l.now())
			if !d.OK {
				retry := ceilSeconds(d.RetryAfter)
				if lim.policy != nil && d.Limit > 0 {
					h := w.Header()
					h["Ratelimit-Policy"] = lim.policy
					h["Ratelimit"] = []string{lim.sfName + ";r=0;t=" + strconv.Itoa(retry)}
				}
				writeProblem(w, r, problemRateLimited.withRetryAfter(retry))
				return
			}
			if d.Limit == 0 {
				next.ServeHTTP(w, r)
				return
			}
			lw := &limitWriter{ResponseWriter: w}
			lw.format(lim, d)
			lw.setHeaders()
			next.ServeHTTP(lw, r)
		})
	}
}

// keyOf returns the limiter key of a request on a route limited by lim.by:
// its client address block, or, counted by identity or header, the hash of
// the verified identity or the header's values ([identity.By.KeyFor]; an
// unverified identity or an absent header counts per address).
func (l *limits) keyOf(lim *routeLimit, r *http.Request, client netip.Addr) limiter.Key {
	addr := limiter.Bucket(client)
	if lim.by == identity.ByClientIP {
		return addr
	}
	var id identity.Result
	if lim.by.IsIdentity() {
		id = l.identity(r)
	}
	k, perAddress := lim.by.KeyFor(r.Header, id, addr)
	if perAddress {
		return addr
	}
	return limiter.Hashed(k)
}

// checkShared logs, once, that every client shares one budget when requests
// come from a loopback or private address and no proxy is trusted: behind a
// proxy, a load balancer or a mesh sidecar, that address is the proxy's.
func (l *limits) checkShared(client netip.Addr) {
	if !l.warn.Load() || !(client.IsLoopback() || client.IsPrivate()) {
		return
	}
	if l.warn.CompareAndSwap(true, false) {
		l.log.Warn("client_ip.trusted_proxies is empty and requests come from a loopback or private address: "+
			"if idemgate runs behind a proxy, load balancer or mesh, every client shares that peer's rate-limit budget; "+
			"list the proxies in client_ip.trusted_proxies (logged once)",
			"peer", client.String())
	}
}

// limitWriter sets a passed request's limit headers when the answer's
// header is written, so that they are this request's whatever the upstream
// or a stored answer carried (DESIGN.md, Replays).
type limitWriter struct {
	http.ResponseWriter
	vals   [4]string // X-RateLimit-Limit, -Remaining, -Reset, RateLimit
	policy []string  // RateLimit-Policy; nil: no IETF headers
	done   bool
}

// format computes the header values of d once.
func (lw *limitWriter) format(lim *routeLimit, d limiter.Decision) {
	reset := strconv.Itoa(ceilSeconds(d.Reset))
	lw.vals = [4]string{strconv.Itoa(d.Limit), strconv.Itoa(d.Remaining), reset}
	if lim.policy != nil {
		lw.policy = lim.policy
		lw.vals[3] = lim.sfName + ";r=" + lw.vals[1] + ";t=" + reset
	}
}

// setHeaders sets the limit headers, replacing any already set. Each value
// is a one-element slice of lw.vals with no room to grow, so that a later
// Header.Add elsewhere copies rather than overwrites it.
func (lw *limitWriter) setHeaders() {
	h := lw.ResponseWriter.Header()
	h["X-Ratelimit-Limit"] = lw.vals[0:1:1]
	h["X-Ratelimit-Remaining"] = lw.vals[1:2:2]
	h["X-Ratelimit-Reset"] = lw.vals[2:3:3]
	if lw.policy != nil {
		h["Ratelimit-Policy"] = lw.policy
		h["Ratelimit"] = lw.vals[3:4:4]
	}
}

func (lw *limitWriter) WriteHeader(code int) {
	if !lw.done && (code >= 200 || code == http.StatusSwitchingProtocols) {
		lw.done = true
		lw.setHeaders()
	}
	lw.ResponseWriter.WriteHeader(code)
}

func (lw *limitWriter) Write(p []byte) (int, error) {
	if !lw.done {
		lw.WriteHeader(http.StatusOK)
	}
	return lw.ResponseWriter.Write(p)
}

// FlushError flushes through http.ResponseController, writing the header
// first if nothing has been written yet.
func (lw *limitWriter) FlushError() error {
	if !lw.done {
		lw.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(lw.ResponseWriter).Flush()
}

// Flush implements http.Flusher.
func (lw *limitWriter) Flush() { lw.FlushError() }

// Unwrap lets http.ResponseController reach the connection (deadlines,
// hijacking for upgrades).
func (lw *limitWriter) Unwrap() http.ResponseWriter { return lw.ResponseWriter }

// sfString returns s as a Structured Fields String (RFC 9651 §3.3.3):
// quoted, with '"' and '\' escaped; other characters outside printable
// ASCII become '_'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ceilSeconds rounds d up to whole seconds, at least 1 for any wait.
func ceilSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return max(1, int((d+time.Second-1)/time.Second))
}
