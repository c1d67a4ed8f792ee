package proxy

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/internal/canonjson"
	"github.com/idemgate/idemgate/internal/pathtmpl"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/limiter"
)

// Middleware is one stage of the pipeline.
type Middleware func(http.Handler) http.Handler

// Chain wraps h in mw, the first outermost: Chain(h, a, b) serves a(b(h)).
// Nil stages are skipped.
func Chain(h http.Handler, mw ...Middleware) http.Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		if mw[i] != nil {
			h = mw[i](h)
		}
	}
	return h
}

// Session names where a route's session id comes from: a path parameter or
// a header. The zero Session means the route takes no turns.
type Session struct {
	Param  string
	Header string
}

// Route is one configured route.
type Route struct {
	Name   string
	Method string
	// Path is the path template, e.g. /ucp/v1/carts/{id}.
	Path string
	// Idempotent routes read the key header and claim keys.
	Idempotent bool
	// RequireKey refuses keyed-route requests without a key (400).
	RequireKey bool
	// Timeout overrides Options.Timeout for this route when > 0.
	Timeout time.Duration
	// FingerprintIgnore lists JSON pointers removed from a JSON body before
	// it is fingerprinted.
	FingerprintIgnore []string
	// Session, when set, makes requests take turns per session id.
	Session Session
	// Protocol is "" or ProtocolGraphQL: a GraphQL endpoint, where only
	// mutations are keyed (graphql.go).
	Protocol string
	// Observe runs an idempotent route in observe mode: keys are checked,
	// claimed and recorded, but nothing is refused or replayed; what would
	// have happened is reported instead (see observe.go).
	Observe bool
}

// route is a Route ready to serve.
type route struct {
	Route
	tmpl    *pathtmpl.Template
	ignore  []canonjson.Pointer
	timeout time.Duration
}

// Options configure a [Proxy]. Upstream, Store (when any route is
// idempotent) and the idempotency sizes are required; other zero fields
// take the defaults of DESIGN.md.
type Options struct {
	// Upstream is the API's base URL.
	Upstream *url.URL
	// Timeout bounds a keyed write's whole answer and a pass-through
	// request's wait for response headers. Default 60s.
	Timeout time.Duration
	// UpstreamHost sends the upstream's host instead of the client's Host.
	UpstreamHost bool
	// Transport carries requests upstream. Default: [NewTransport].
	Transport http.RoundTripper

	Routes      []Route
	Store       keystore.Store
	Idempotency Idempotency

	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// ClientAddr decides the client address of a request. Default:
	// [limiter.ClientAddr] (the TCP peer, or the rightmost untrusted
	// X-Forwarded-For entry when the peer is a trusted proxy).
	ClientAddr func(peer netip.Addr, xff []string, trusted []netip.Prefix) netip.Addr
	// MaxBufferedBytes bounds the keyed request bodies held at once.
	// Default 256 MiB.
	MaxBufferedBytes int64

	// Logger receives one access-log line per request and the proxy's
	// errors. Default: discard.
	Logger *slog.Logger
	// Metrics, when set, records the requests' metrics (see metrics.go).
	// Wrap Store with [Metrics.Store] for the store's.
	Metrics *Metrics

	// Stages other packages provide; nil stages are left out. With Routes
	// they are the first [Routing]; [Proxy.Reload] replaces them.
	EdgeLimit   Middleware
	RouteLimit  Middleware
	SessionTurn Middleware
}

// Idempotency is the idempotency section of the configuration.
type Idempotency struct {
	Header           string // default Idempotency-Key
	IdentityHeaders  []string
	RequireIdentity  bool
	Tenant           string
	TenantHosts      map[string]string // lower-case host (with or without port) → tenant
	Retention        time.Duration     // default 25h
	Lease            time.Duration     // default 120s
	MaxLease         time.Duration     // default 60m
	MaxBodyBytes     int64             // default 1 MiB
	MaxResponseBytes int64             // default 64 KiB
	ReplayHeader     string            // "" adds no header
	ReuseStatus      int               // 409 or 422
	ReleaseStatuses  []int
	DropHeaders      []string
}

// Proxy is the idemgate pipeline. It is an http.Handler, safe for
// concurrent use. Build it with [New].
type Proxy struct {
	handler  http.Handler
	log      *slog.Logger
	opts     Options
	cur      atomic.Pointer[routing] // see Reload
	upstream http.Handler            // step 7, shared by every routing
	metrics  *Metrics
	release  [600]bool // statuses that release the key
	drop     map[string]bool
	buffered atomic.Int64 // keyed body bytes held
	renewals renewer
}

// New checks opts and builds the pipeline.
func New(opts Options) (*Proxy, error) {
	if opts.Upstream == nil || opts.Upstream.Scheme == "" || opts.Upstream.Host == "" {
		return nil, errors.New("proxy: Upstream must be an absolute URL")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 60 * time.Second
	}
	if opts.Transport == nil {
		opts.Transport = NewTransport()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxBufferedBytes <= 0 {
		opts.MaxBufferedBytes = 256 << 20
	}
	if opts.ClientAddr == nil {
		opts.ClientAddr = limiter.ClientAddr
	}
	id := &opts.Idempotency
	if id.Header == "" {
		id.Header = "Idempotency-Key"
	}
	id.Header = http.CanonicalHeaderKey(id.Header)
	if id.Retention <= 0 {
		id.Retention = 25 * time.Hour
	}
	if id.Lease <= 0 {
		id.Lease = 120 * time.Second
	}
	if id.MaxLease < id.Lease {
		id.MaxLease = max(60*time.Minute, id.Lease)
	}
	if id.MaxBodyBytes <= 0 {
		id.MaxBodyBytes = 1 << 20
	}
	if id.MaxResponseBytes <= 0 {
		id.MaxResponseBytes = 64 << 10
	}
	if id.ReuseStatus == 0 {
		id.ReuseStatus = http.StatusConflict
	}
	p := &Proxy{opts: opts, log: opts.Logger, drop: make(map[string]bool), metrics: opts.Metrics}
	for _, s := range id.ReleaseStatuses {
		if s < 100 || s >= len(p.release) {
			return nil, fmt.Errorf("proxy: release status %d out of range", s)
		}
		p.release[s] = true
	}
	for _, h := range id.DropHeaders {
		p.drop[http.CanonicalHeaderKey(h)] = true
	}
	p.renewals.init(opts.Store, opts.Logger)
	p.upstream = p.newUpstream()
	rt, err := p.compile(Routing{
		Routes:      opts.Routes,
		EdgeLimit:   opts.EdgeLimit,
		RouteLimit:  opts.RouteLimit,
		SessionTurn: opts.SessionTurn,
	})
	if err != nil {
		return nil, err
	}
	p.cur.Store(rt)
	p.handler = p.serveExchange(http.HandlerFunc(p.serveRouting)) // recover, request ID, access log
	return p, nil
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.handler.ServeHTTP(w, r)
}

// Close waits for the lease renewals of requests still running to stop. It
// does not close the Store.
func (p *Proxy) Close() error {
	p.renewals.close()
	return nil
}

// matchRoute is DESIGN.md step 2, on the request's routing.
func (p *Proxy) matchRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := exchangeOf(r)
		ex.pastEdge = true
		path := r.URL.EscapedPath()
		if i, ok := ex.routing.table.Lookup(r.Method, path); ok {
			ex.route = ex.routing.routes[i]
			ex.params = path
		}
		next.ServeHTTP(w, r)
	})
}

// Routing is the part of a [Proxy] that [Proxy.Reload] replaces while it
// serves: the routes and the stages that depend on them. The stages run in
// DESIGN.md's order (see [New]); nil stages are left out.
type Routing struct {
	Routes      []Route
	EdgeLimit   Middleware
	RouteLimit  Middleware
	SessionTurn Middleware
}

// routing is a compiled Routing: its table and the chain after the
// outermost stage. It never changes once built.
type routing struct {
	src     Routing
	table   *pathtmpl.Table
	routes  []*route
	handler http.Handler
}

// compile checks rt's routes and builds its chain.
func (p *Proxy) compile(rt Routing) (*routing, error) {
	c := &routing{src: rt}
	var entries []pathtmpl.Entry
	var errs []error
	needStore := false
	for i, rc := range rt.Routes {
		t, err := pathtmpl.Parse(rc.Path)
		if err != nil {
			errs = append(errs, fmt.Errorf("proxy: route %q: %w", rc.Name, err))
			continue
		}
		r := &route{Route: rc, tmpl: t, timeout: rc.Timeout}
		if r.timeout <= 0 {
			r.timeout = p.opts.Timeout
		}
		for _, s := range rc.FingerprintIgnore {
			ptr, err := canonjson.ParsePointer(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("proxy: route %q: fingerprint_ignore %q: %w", rc.Name, s, err))
				continue
			}
			r.ignore = append(r.ignore, ptr)
		}
		if rc.Session.Param != "" && !t.HasParam(rc.Session.Param) {
			errs = append(errs, fmt.Errorf("proxy: route %q: session parameter %q not in path %s", rc.Name, rc.Session.Param, rc.Path))
		}
		needStore = needStore || rc.Idempotent
		c.routes = append(c.routes, r)
		entries = append(entries, pathtmpl.Entry{Method: rc.Method, Template: t, Index: i})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if needStore && p.opts.Store == nil {
		return nil, errors.New("proxy: a Store is required for idempotent routes")
	}
	table, err := pathtmpl.NewTable(entries)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	c.table = table
	// The order is DESIGN.md's and is authoritative; chain_test.go pins it.
	c.handler = Chain(p.upstream,
		rt.EdgeLimit,   // 1. edge limit
		p.matchRoute,   // 2. route match
		rt.RouteLimit,  // 3. route limit
		p.idempotency,  // 4. key check, 5. claim, 8. record
		rt.SessionTurn, // 6. session turn
	) // 7. upstream
	return c, nil
}

// Reload replaces the proxy's routes and stages with rt, atomically: each
// request runs on the routing that was current when it arrived, from its
// first stage to its last, so requests already running finish on the old
// one. Stages that only the old routing uses may be closed once Reload
// returns only if they keep answering after Close (as [limiter.Limiter]
// does). On error (a bad path template, ambiguous routes, an idempotent
// route without a Store) nothing changes. Reload is safe for concurrent use
// with serving; concurrent Reloads leave the last one's routing.
func (p *Proxy) Reload(rt Routing) error {
	c, err := p.compile(rt)
	if err != nil {
		return err
	}
	p.cur.Store(c)
	return nil
}

// Routing returns the routing the proxy serves now (the last one given to
// [New] or [Proxy.Reload]).
func (p *Proxy) Routing() Routing { return p.cur.Load().src }

// serveRouting runs a request through the routing current at its arrival.
func (p *Proxy) serveRouting(w http.ResponseWriter, r *http.Request) {
	ex := exchangeOf(r)
	ex.routing = p.cur.Load()
	ex.routing.handler.ServeHTTP(w, r)
}

// SessionID returns the session id of r on its route and whether the route
// takes turns with one: the path parameter as sent (escaped, case kept) or
// the header's value. A request without the id takes no turn.
func SessionID(r *http.Request) (id string, ok bool) {
	ex := exchangeOf(r)
	if ex == nil || ex.route == nil {
		return "", false
	}
	s := ex.route.Session
	switch {
	case s.Param != "":
		return ex.route.tmpl.Param(ex.params, s.Param)
	case s.Header != "":
		v := r.Header.Get(s.Header)
		return v, v != ""
	}
	return "", false
}
