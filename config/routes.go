package config

import (
	"fmt"
	"time"

	"github.com/idemgate/idemgate/internal/pathtmpl"
)

// Template parses the route's path template. [Config.Validate] reports the
// same error under the key routes[i].path.
func (r *Route) Template() (*pathtmpl.Template, error) {
	return pathtmpl.Parse(r.Path)
}

// Protected reports whether the route has any protection (idempotent,
// require_key, session or rate_limit): a request that may reach it under
// one spelling and not under another is refused (see
// [pathtmpl.Table.Match]).
func (r *Route) Protected() bool {
	return r.Idempotent || r.RequireKey || r.Session != nil || r.RateLimit != nil
}

// PathCaseOption returns the [pathtmpl.Case] of c.PathCase; "" is the
// default, insensitive.
func (c *Config) PathCaseOption() (pathtmpl.Case, error) {
	return pathtmpl.ParseCase(c.PathCase)
}

// RouteTable builds the routing table of c.Routes, for a validated c, with
// c.PathCase and each route's [Route.Protected]. The index that
// [pathtmpl.Table.Match] (and [pathtmpl.Table.Lookup]) returns is a
// position in c.Routes, and templates[i] is the parsed template of
// c.Routes[i]. It fails when a path does not parse, path_case is invalid or
// two routes are ambiguous. It has no side effects: c is left as it is.
func (c *Config) RouteTable() (table *pathtmpl.Table, templates []*pathtmpl.Template, err error) {
	templates = make([]*pathtmpl.Template, len(c.Routes))
	entries := make([]pathtmpl.Entry, len(c.Routes))
	for i := range c.Routes {
		r := &c.Routes[i]
		t, err := r.Template()
		if err != nil {
			return nil, nil, fmt.Errorf("routes[%d].path: %w", i, err)
		}
		templates[i] = t
		entries[i] = pathtmpl.Entry{Method: r.Method, Template: t, Index: i, Protected: r.Protected()}
	}
	pc, err := c.PathCaseOption()
	if err != nil {
		return nil, nil, fmt.Errorf("path_case: %w", err)
	}
	table, err = pathtmpl.NewTableOptions(entries, pathtmpl.Options{Case: pc})
	if err != nil {
		return nil, nil, err
	}
	return table, templates, nil
}

// EffectiveMode returns the route's mode: its own, or global when it has
// none.
func (r *Route) EffectiveMode(global string) string {
	if r.Mode != "" {
		return r.Mode
	}
	return global
}

// EffectiveTimeout returns the route's timeout: its own, or upstream when it
// has none.
func (r *Route) EffectiveTimeout(upstream Upstream) time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return upstream.Timeout
}
