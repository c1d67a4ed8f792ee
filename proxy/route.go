package proxy

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/internal/canonjson"
	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/internal/modes"
	"github.com/idemgate/idemgate/internal/pathtmpl"
	"github.com/idemgate/idemgate/internal/problem"
	"github.com/idemgate/idemgate/keystore"
)

// route is a Route ready to serve.
type route struct {
	Route
	tmpl   *pathtmpl.Template
	ignore []canonjson.Pointer
	// formIgnore is ignore's entries as literal form parameter names.
	formIgnore []string
	timeout    time.Duration

	// The route's policy, its own or the global one (DESIGN.md, Config).
	retention   time.Duration
	releasable  *[600]bool // statuses after which a claim is given up
	drop        map[string]bool
	wait        bool // in_progress: wait (wait.go)
	waitTimeout time.Duration
	maxBody     int64  // max_body_bytes: a keyed request's body, decoded too
	reuseStatus int    // the status of idempotency_key_reused
	replayHdr   string // the header set on replays; "" none
	errs        *problem.Template

	lateWait time.Duration // late_answer_wait (late.go)
	hold     bool          // unknown_outcome: hold (unknown.go)
	probe    *probeSpec    // the reconcile probe, or nil (reconcile.go)

	series *routeSeries // the route's request series; nil without metrics (metrics.go)
}

// snapshot is a compiled [Policy]: its route table, its values made ready
// to serve and the chain after the outermost stages. It never changes once
// built; a request reads the one current at its arrival (exchange.snap).
type snapshot struct {
	src Policy
	// idem is src.Idempotency with its header canonical and TenantFor set.
	idem      Idempotency
	requestID string // src.RequestIDHeader, canonical, or X-Request-Id
	identity  *identity.Resolver
	table     *pathtmpl.Table
	routes    []*route
	handler   http.Handler
	errs      *problem.Template // src.Errors, compiled
	log       *slog.Logger
	onErrTmpl func(route string) // Deps.OnErrorTemplate
}

// compileRoutes checks pol and builds its snapshot but the chain: the
// values, and the route table, whose literal segments compare as
// pol.PathCase says. A route is protected (a spelling that may or may not
// reach it is refused, see [pathtmpl.Table.Match]) when it is idempotent,
// requires a key, takes session turns or has a route limit.
func (p *Proxy) compileRoutes(pol Policy) (*snapshot, error) {
	routes, global := pol.Routes, pol.Errors
	c := &snapshot{
		src:       pol,
		idem:      pol.Idempotency,
		log:       p.log,
		requestID: http.CanonicalHeaderKey(cmp.Or(pol.RequestIDHeader, problem.RequestIDHeader)),
		identity:  pol.Identity,
		onErrTmpl: p.deps.OnErrorTemplate,
	}
	var errs []error
	id := &c.idem
	id.Header = http.CanonicalHeaderKey(id.Header)
	if id.TenantFor == nil {
		id.TenantFor = func(string) (string, bool) { return "", true }
	}
	if !absolute(pol.Upstream.URL) {
		errs = append(errs, errors.New("proxy: Policy.Upstream.URL must be an absolute URL"))
	}
	for _, bad := range []struct {
		ok   bool
		what string
	}{
		{pol.Upstream.Timeout > 0, "Upstream.Timeout"},
		{id.Header != "", "Idempotency.Header"},
		{id.Lease > 0 && id.MaxLease >= id.Lease, "Idempotency.Lease (and MaxLease >= Lease)"},
		{id.MaxBodyBytes > 0, "Idempotency.MaxBodyBytes"},
		{id.MaxResponseBytes > 0, "Idempotency.MaxResponseBytes"},
		{id.ReuseStatus > 0, "Idempotency.ReuseStatus"},
	} {
		if !bad.ok {
			errs = append(errs, fmt.Errorf("proxy: Policy.%s must be set", bad.what))
		}
	}
	if c.identity == nil {
		def, err := identity.New(identity.Options{Headers: id.IdentityHeaders})
		if err != nil {
			errs = append(errs, fmt.Errorf("proxy: identity headers: %w", err))
		}
		c.identity = def
	}
	var err error
	if c.errs, err = problem.Compile(global); err != nil {
		errs = append(errs, fmt.Errorf("proxy: errors: %w", err))
	}
	var entries []pathtmpl.Entry
	needStore := false
	for i, rc := range routes {
		t, err := pathtmpl.Parse(rc.Path)
		if err != nil {
			errs = append(errs, fmt.Errorf("proxy: route %q: %w", rc.Name, err))
			continue
		}
		r := &route{Route: rc, tmpl: t, timeout: cmp.Or(rc.Timeout, pol.Upstream.Timeout)}
		for _, s := range rc.FingerprintIgnore {
			ptr, err := canonjson.ParsePointer(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("proxy: route %q: fingerprint_ignore %q: %w", rc.Name, s, err))
				continue
			}
			r.ignore = append(r.ignore, ptr)
		}
		r.formIgnore = formIgnore(r.ignore)
		if rc.Session.Param != "" && !t.HasParam(rc.Session.Param) {
			errs = append(errs, fmt.Errorf("proxy: route %q: session parameter %q not in path %s", rc.Name, rc.Session.Param, rc.Path))
		}
		if err := compilePolicy(r, id, global); err != nil {
			errs = append(errs, err)
		} else if err := compileProbe(r); err != nil {
			errs = append(errs, err)
		}
		if _, ok := p.deps.Store.(keystore.UnknownStore); r.hold && rc.Idempotent && !ok {
			errs = append(errs, fmt.Errorf("proxy: route %q: unknown_outcome: hold needs a store with unknown records (%T)", rc.Name, p.deps.Store))
		}
		needStore = needStore || rc.Idempotent
		c.routes = append(c.routes, r)
		protected := rc.Idempotent || rc.RequireKey || rc.Session != (Session{}) || pol.RouteLimits[rc.Name] != nil
		entries = append(entries, pathtmpl.Entry{Method: rc.Method, Template: t, Index: i, Protected: protected})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if needStore && p.deps.Store == nil {
		return nil, errors.New("proxy: a Store is required for idempotent routes")
	}
	table, err := pathtmpl.NewTableOptions(entries, pathtmpl.Options{Case: pol.PathCase})
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	c.table = table
	return c, nil
}

// statusSet returns the statuses of list as a lookup table.
func statusSet(list []int) (*[600]bool, error) {
	set := new([600]bool)
	for _, s := range list {
		if s < 100 || s >= len(set) {
			return nil, fmt.Errorf("release status %d out of range", s)
		}
		set[s] = true
	}
	return set, nil
}

// headerSet returns the header names of list, canonical, as a set.
func headerSet(list []string) map[string]bool {
	m := make(map[string]bool, len(list))
	for _, h := range list {
		m[http.CanonicalHeaderKey(h)] = true
	}
	return m
}

// compilePolicy fills in r's policy: its own keys, else the global ones of
// id.
func compilePolicy(r *route, id *Idempotency, global problem.Spec) error {
	r.retention = cmp.Or(r.Retention, id.Retention)
	r.maxBody = cmp.Or(r.MaxBodyBytes, id.MaxBodyBytes)
	r.reuseStatus = cmp.Or(r.ReuseStatus, id.ReuseStatus)
	r.replayHdr = id.ReplayHeader
	if r.ReplayHeader != nil {
		r.replayHdr = *r.ReplayHeader
	}
	statuses, drop := id.ReleaseStatuses, id.DropHeaders
	if r.ReleaseStatuses != nil {
		statuses = r.ReleaseStatuses
	}
	if r.DropHeaders != nil {
		drop = r.DropHeaders
	}
	var err error
	if r.releasable, err = statusSet(statuses); err != nil {
		return fmt.Errorf("proxy: route %q: %w", r.Name, err)
	}
	r.drop = headerSet(drop)
	if r.wait, err = modes.Wait(cmp.Or(r.InProgress, id.InProgress)); err != nil {
		return fmt.Errorf("proxy: route %q: in_progress %w", r.Name, err)
	}
	r.waitTimeout = min(cmp.Or(r.WaitTimeout, id.WaitTimeout), r.timeout)
	if r.hold, err = modes.Hold(cmp.Or(r.UnknownOutcome, id.UnknownOutcome)); err != nil {
		return fmt.Errorf("proxy: route %q: unknown_outcome %w", r.Name, err)
	}
	r.lateWait = id.LateAnswerWait
	if r.LateAnswerWait != nil {
		r.lateWait = *r.LateAnswerWait
	}
	// The policy holds no defaults (config.Default has them): a zero
	// bound a keyed route would use is a policy built without it, refused
	// here rather than read as "no wait" or "keep no call".
	switch {
	case !r.Idempotent:
	case r.wait && r.waitTimeout <= 0:
		return fmt.Errorf("proxy: route %q: in_progress: wait needs Policy.Idempotency.WaitTimeout (or the route's WaitTimeout) > 0", r.Name)
	case r.lateWait > 0 && id.LateAnswerMax <= 0:
		return fmt.Errorf("proxy: route %q: a late answer wait needs Policy.Idempotency.LateAnswerMax > 0", r.Name)
	}
	spec := global
	if r.Errors != nil {
		spec = global.Merge(*r.Errors)
	}
	t, err := problem.Compile(spec)
	if err != nil {
		return fmt.Errorf("proxy: route %q: errors: %w", r.Name, err)
	}
	r.errs = t
	return nil
}

// releasableStatus reports whether an answer with status s on this route
// proves that nothing ran, so that its claim is given up
// (release_statuses).
func (r *route) releasableStatus(s int) bool {
	return s >= 0 && s < len(r.releasable) && r.releasable[s]
}

// matchRoute is DESIGN.md step 2, on the request's stages: the route is
// found on the normalized path (pathtmpl.Table.Match: method compared
// case-insensitively, literal segments as path_case says). A path that
// cannot be normalized, or whose spellings an upstream may read as
// different endpoints one of which is protected, gets 400 request_invalid
// and nothing is forwarded. The request itself goes on exactly as received:
// normalization is for matching and session ids only.
func (p *Proxy) matchRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := exchangeOf(r)
		ex.pastEdge = true
		m, ok, err := ex.snap.table.Match(r.Method, r.URL.EscapedPath())
		if err != nil {
			pr := problemRequestInvalid
			if errors.Is(err, pathtmpl.ErrAmbiguousPath) {
				pr.Detail = "The request path may name different endpoints; send it without encoded slashes, backslashes or ';'"
			}
			writeProblem(w, r, pr)
			return
		}
		if ok {
			ex.route = ex.snap.routes[m.Index]
			ex.match = m
		}
		next.ServeHTTP(w, r)
	})
}

// routeName returns the name of the route r matched, or "".
func routeName(r *http.Request) string {
	if ex := exchangeOf(r); ex != nil && ex.route != nil {
		return ex.route.Name
	}
	return ""
}
