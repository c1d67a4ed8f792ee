package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/internal/canonjson"
	"github.com/idemgate/idemgate/internal/pathtmpl"
)

// route is a Route ready to serve.
type route struct {
	Route
	tmpl    *pathtmpl.Template
	ignore  []canonjson.Pointer
	timeout time.Duration
}

// stages is a compiled Stages: its route table and the chain after the
// outermost stages. It never changes once built.
type stages struct {
	src     Stages
	table   *pathtmpl.Table
	routes  []*route
	handler http.Handler
}

// compileRoutes checks routes and builds their table.
func (p *Proxy) compileRoutes(routes []Route) (*stages, error) {
	c := &stages{}
	var entries []pathtmpl.Entry
	var errs []error
	needStore := false
	for i, rc := range routes {
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
	return c, nil
}

// matchRoute is DESIGN.md step 2, on the request's stages.
func (p *Proxy) matchRoute(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ex := exchangeOf(r)
		ex.pastEdge = true
		path := r.URL.EscapedPath()
		if i, ok := ex.stages.table.Lookup(r.Method, path); ok {
			ex.route = ex.stages.routes[i]
			ex.params = path
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
