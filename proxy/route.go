package proxy

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/internal/canonjson"
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
}

// stages is a compiled Stages: its route table and the chain after the
// outermost stages. It never changes once built.
type stages struct {
	src Stages
	up  Upstream // the upstream of these stages: Stages.Upstream, or the Options'
	// keyHeader and bodyTimeout are Stages.KeyHeader and
	// RequestBodyTimeout, or the Options' when unset.
	keyHeader   string
	bodyTimeout time.Duration
	lateMax     int // Stages.LateAnswerMax
	keySyntax   KeySyntax
	// requestID is Stages.RequestIDHeader, canonical, or X-Request-Id.
	requestID string
	// maxWaiters is Stages.MaxWaiters, else the Options', else
	// DefaultMaxWaiters; < 0: none wait.
	maxWaiters int
	table      *pathtmpl.Table
	routes     []*route
	handler    http.Handler
	errs       *problem.Template // Stages.Errors, compiled
	log        *slog.Logger
}

// upstreamOf returns st's upstream: st.Upstream with its defaults, or the
// Options' upstream.
func (p *Proxy) upstreamOf(st Stages) Upstream {
	if st.Upstream == nil {
		return Upstream{URL: p.opts.Upstream, Host: p.opts.UpstreamHost, Timeout: p.opts.Timeout}
	}
	up := *st.Upstream
	if up.Timeout <= 0 {
		up.Timeout = defaultTimeout
	}
	return up
}

// compileRoutes checks st.Routes and builds their table, whose literal
// segments compare as st.PathCase says. A route is protected (a spelling
// that may or may not reach it is refused, see [pathtmpl.Table.Match]) when
// it is idempotent, requires a key, takes session turns or has a route
// limit.
func (p *Proxy) compileRoutes(st Stages) (*stages, error) {
	routes, global := st.Routes, st.Errors
	c := &stages{
		log:         p.log,
		up:          p.upstreamOf(st),
		keyHeader:   cmp.Or(st.KeyHeader, p.opts.Idempotency.Header),
		bodyTimeout: cmp.Or(st.RequestBodyTimeout, p.opts.RequestBodyTimeout),
		lateMax:     st.LateAnswerMax,
		keySyntax:   st.KeySyntax,
		requestID:   http.CanonicalHeaderKey(cmp.Or(st.RequestIDHeader, problem.RequestIDHeader)),
		maxWaiters:  cmp.Or(st.MaxWaiters, p.opts.Idempotency.WaitQueueDepth, DefaultMaxWaiters),
	}
	var entries []pathtmpl.Entry
	var errs []error
	var err error
	if c.errs, err = problem.Compile(global); err != nil {
		errs = append(errs, fmt.Errorf("proxy: errors: %w", err))
	}
	needStore := false
	for i, rc := range routes {
		t, err := pathtmpl.Parse(rc.Path)
		if err != nil {
			errs = append(errs, fmt.Errorf("proxy: route %q: %w", rc.Name, err))
			continue
		}
		r := &route{Route: rc, tmpl: t, timeout: rc.Timeout}
		if r.timeout <= 0 {
			r.timeout = c.up.Timeout
		}
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
		if err := p.compilePolicy(r, global); err != nil {
			errs = append(errs, err)
		} else if err := compileProbe(r); err != nil {
			errs = append(errs, err)
		}
		if _, ok := p.opts.Store.(keystore.UnknownStore); r.hold && rc.Idempotent && !ok {
			errs = append(errs, fmt.Errorf("proxy: route %q: unknown_outcome: hold needs a store with unknown records (%T)", rc.Name, p.opts.Store))
		}
		needStore = needStore || rc.Idempotent
		c.routes = append(c.routes, r)
		protected := rc.Idempotent || rc.RequireKey || rc.Session != (Session{}) || st.RouteLimits[rc.Name] != nil
		entries = append(entries, pathtmpl.Entry{Method: rc.Method, Template: t, Index: i, Protected: protected})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if needStore && p.opts.Store == nil {
		return nil, errors.New("proxy: a Store is required for idempotent routes")
	}
	table, err := pathtmpl.NewTableOptions(entries, pathtmpl.Options{Case: st.PathCase})
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	c.table = table
	return c, nil
}

// compilePolicy fills in r's policy: its own keys, else the global ones.
func (p *Proxy) compilePolicy(r *route, global problem.Spec) error {
	id := &p.opts.Idempotency
	r.retention = cmp.Or(r.Retention, id.Retention)
	r.maxBody = cmp.Or(r.MaxBodyBytes, id.MaxBodyBytes)
	r.reuseStatus = cmp.Or(r.ReuseStatus, id.ReuseStatus, http.StatusConflict)
	r.replayHdr = id.ReplayHeader
	if r.ReplayHeader != nil {
		r.replayHdr = *r.ReplayHeader
	}
	r.releasable = &p.releasable
	if r.ReleaseStatuses != nil {
		r.releasable = new([600]bool)
		for _, s := range r.ReleaseStatuses {
			if s < 100 || s >= len(r.releasable) {
				return fmt.Errorf("proxy: route %q: release status %d out of range", r.Name, s)
			}
			r.releasable[s] = true
		}
	}
	r.drop = p.drop
	if r.DropHeaders != nil {
		r.drop = make(map[string]bool, len(r.DropHeaders))
		for _, h := range r.DropHeaders {
			r.drop[http.CanonicalHeaderKey(h)] = true
		}
	}
	switch cmp.Or(r.InProgress, id.InProgress, InProgressReject) {
	case InProgressReject:
	case InProgressWait:
		r.wait = true
	default:
		return fmt.Errorf("proxy: route %q: in_progress %q: want %q or %q", r.Name, r.InProgress, InProgressReject, InProgressWait)
	}
	r.waitTimeout = min(cmp.Or(r.WaitTimeout, id.WaitTimeout, 10*time.Second), r.timeout)
	switch cmp.Or(r.UnknownOutcome, id.UnknownOutcome, UnknownTakeover) {
	case UnknownTakeover:
	case UnknownHold:
		r.hold = true
	default:
		return fmt.Errorf("proxy: route %q: unknown_outcome %q: want %q or %q", r.Name, r.UnknownOutcome, UnknownTakeover, UnknownHold)
	}
	r.lateWait = id.LateAnswerWait
	if r.LateAnswerWait != nil {
		r.lateWait = *r.LateAnswerWait
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
		m, ok, err := ex.stages.table.Match(r.Method, r.URL.EscapedPath())
		if err != nil {
			pr := problemRequestInvalid
			if errors.Is(err, pathtmpl.ErrAmbiguousPath) {
				pr.Detail = "The request path may name different endpoints; send it without encoded slashes, backslashes or ';'"
			}
			writeProblem(w, r, pr)
			return
		}
		if ok {
			ex.route = ex.stages.routes[m.Index]
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
