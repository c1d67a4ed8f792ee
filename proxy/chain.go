package proxy

import (
	"net/http"

	"github.com/idemgate/idemgate/internal/problem"
)

// middleware is one stage of the pipeline.
type middleware func(http.Handler) http.Handler

// chain wraps h in mw, the first outermost: chain(h, a, b) serves a(b(h)).
// Nil stages are left out.
func chain(h http.Handler, mw ...middleware) http.Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		if mw[i] != nil {
			h = mw[i](h)
		}
	}
	return h
}

// compile checks pol and builds its snapshot: the route table, the
// policy values and the chain after the outermost stages.
func (p *Proxy) compile(pol Policy) (*snapshot, error) {
	c, err := p.compileRoutes(pol)
	if err != nil {
		return nil, err
	}
	lim, err := newLimits(pol, p.deps, p.identityOf)
	if err != nil {
		return nil, err
	}
	c.handler = chain(p.upstream,
		lim.edgeStage(),             // 1. edge limit
		p.matchRoute,                // 2. route match
		lim.routeStage(),            // 3. route limit
		p.keyCheck,                  // 4. key check (and the body)
		p.claim,                     // 5. claim, 8. record
		p.sessionTurn(pol.Sessions), // 6. session turn
	) // 7. upstream
	return c, nil
}

// Apply compiles pol into one immutable snapshot and swaps it in,
// atomically: each request runs on the snapshot that was current when it
// arrived, from its first stage to its last, so requests already running
// finish on the old one. Limiters, a queue and a resolver that only the
// old snapshot uses may be closed once Apply returns only if they keep
// answering after Close (as [limiter.Limiter], [session.Queue] and
// [identity.Resolver] do). The buffered-bytes budget, shared by every
// snapshot, takes pol's caps at once. On error (a bad path template,
// ambiguous routes, an idempotent route without a Store, a nil limiter, a
// missing value) nothing changes. Apply is safe for concurrent use with
// serving; concurrent Applies leave the last one's snapshot.
func (p *Proxy) Apply(pol Policy) error {
	c, err := p.compile(pol)
	if err != nil {
		return err
	}
	p.metrics.initRoutes(c.routes, pol)
	p.budget.SetLimits(pol.MaxBufferedBytes, pol.MaxBufferedBytesPerClient)
	p.cur.Store(c)
	return nil
}

// Policy returns the policy the proxy serves now (the last one given to
// [Proxy.Apply]).
func (p *Proxy) Policy() Policy {
	if c := p.cur.Load(); c != nil {
		return c.src
	}
	return Policy{}
}

// RouteDropHeaders returns the drop_headers of the running route named
// name, and false when that route has none of its own (the global
// Idempotency.DropHeaders apply) or is not running. The admin API's
// complete drops what the record's route drops.
func (p *Proxy) RouteDropHeaders(name string) ([]string, bool) {
	for _, r := range p.Policy().Routes {
		if r.Name == name {
			return r.DropHeaders, r.DropHeaders != nil
		}
	}
	return nil, false
}

// RequestIDHeader returns the header the running policy reads request IDs
// from and answers them with (Policy.RequestIDHeader, canonical). The
// admin API uses it too.
func (p *Proxy) RequestIDHeader() string {
	if c := p.cur.Load(); c != nil {
		return c.requestID
	}
	return problem.RequestIDHeader
}

// snapshotOf returns the snapshot r runs on: the one its exchange took, or
// for a request outside the chain the current one.
func (p *Proxy) snapshotOf(r *http.Request) *snapshot {
	if ex := exchangeOf(r); ex != nil {
		return ex.snap
	}
	return p.cur.Load()
}

// serveSnapshot runs a request through the snapshot current at its arrival.
func (p *Proxy) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	exchangeOf(r).snap.handler.ServeHTTP(w, r) // taken by begin
}
