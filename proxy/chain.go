package proxy

import (
	"errors"
	"net/http"
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

// New checks opts and builds the pipeline: every stage, from opts.Stages.
func New(opts Options) (*Proxy, error) {
	p, err := newProxy(opts)
	if err != nil {
		return nil, err
	}
	if err := p.Reload(opts.Stages); err != nil {
		return nil, err
	}
	// The order is DESIGN.md's and is authoritative; chain_test.go pins it.
	p.handler = chain(http.HandlerFunc(p.serveStages),
		p.begin,         // the exchange: request ID, client address
		p.tracing(),     // the server span (nil without a tracer)
		p.countInFlight, // in-flight gauge (drops after the request is logged)
		p.logAccess,     // one access-log line and the request metrics
		p.recoverPanic,  // a panic answers 500 (or aborts a started answer)
	)
	return p, nil
}

// compile checks st and builds the stages after the outermost ones.
func (p *Proxy) compile(st Stages) (*stages, error) {
	if st.Upstream != nil && !absolute(st.Upstream.URL) {
		return nil, errors.New("proxy: Stages.Upstream.URL must be an absolute URL")
	}
	c, err := p.compileRoutes(st)
	if err != nil {
		return nil, err
	}
	lim, err := newLimits(st, p.opts, p.identityOf)
	if err != nil {
		return nil, err
	}
	c.src = st
	c.handler = chain(p.upstream,
		lim.edgeStage(),            // 1. edge limit
		p.matchRoute,               // 2. route match
		lim.routeStage(),           // 3. route limit
		p.keyCheck,                 // 4. key check (and the body)
		p.claim,                    // 5. claim, 8. record
		p.sessionTurn(st.Sessions), // 6. session turn
	) // 7. upstream
	return c, nil
}

// Reload replaces the proxy's stages with st, atomically: each request runs
// on the stages that were current when it arrived, from its first stage to
// its last, so requests already running finish on the old ones. Limiters and
// a queue that only the old stages use may be closed once Reload returns
// only if they keep answering after Close (as [limiter.Limiter] and
// [session.Queue] do). On error (a bad path template, ambiguous routes, an
// idempotent route without a Store, a nil limiter) nothing changes. Reload
// is safe for concurrent use with serving; concurrent Reloads leave the
// last one's stages.
func (p *Proxy) Reload(st Stages) error {
	c, err := p.compile(st)
	if err != nil {
		return err
	}
	p.metrics.initRoutes(c.routes, st)
	p.cur.Store(c)
	return nil
}

// Stages returns the stages the proxy serves now (the last ones given to
// [New] or [Proxy.Reload]).
func (p *Proxy) Stages() Stages { return p.cur.Load().src }

// RouteDropHeaders returns the drop_headers of the running route named
// name, and false when that route has none of its own (the global
// Idempotency.DropHeaders apply) or is not running. The admin API's
// complete drops what the record's route drops.
func (p *Proxy) RouteDropHeaders(name string) ([]string, bool) {
	for _, r := range p.cur.Load().src.Routes {
		if r.Name == name {
			return r.DropHeaders, r.DropHeaders != nil
		}
	}
	return nil, false
}

// RequestIDHeader returns the header the running stages read request IDs
// from and answer them with (Stages.RequestIDHeader, canonical). The admin
// API uses it too.
func (p *Proxy) RequestIDHeader() string { return p.cur.Load().requestID }

// serveStages runs a request through the stages current at its arrival.
func (p *Proxy) serveStages(w http.ResponseWriter, r *http.Request) {
	exchangeOf(r).stages.handler.ServeHTTP(w, r) // taken by begin
}
