package openapi

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/pathtmpl"
)

// Report is what [Against] found.
type Report struct {
	// Unprotected are the write operations no idempotent route matches.
	Unprotected []Finding
	// Unmatched are the routes that match no operation of their method.
	Unmatched []Finding
	// Problems are the operations that could not be checked (their path
	// does not convert) and the document's other notes.
	Problems []Problem
	// Writes is the number of write operations checked.
	Writes int
}

// Finding is one operation or route of a [Report].
type Finding struct {
	Method, Path string
	// Pointer is the operation's JSON pointer; Route the route's name.
	Pointer, Route string
	Msg            string
}

func (f Finding) String() string {
	if f.Pointer != "" {
		return fmt.Sprintf("%s: %s %s: %s", f.Pointer, f.Method, f.Path, f.Msg)
	}
	return fmt.Sprintf("route %q (%s %s): %s", f.Route, f.Method, f.Path, f.Msg)
}

// Against checks routes against spec. A write operation is protected when
// the route that idemgate would pick for a request to it (same method, the
// operation's path with a sample value in each parameter, the most specific
// template winning) is idempotent and not in observe mode. A route matches an operation when some
// path matches both its template and the operation's, method equal.
// Paths compare as idemgate's path templates do (internal/pathtmpl), with
// the base path of [Options] or the document's servers applied.
func Against(spec *Spec, routes []Route, opts Options) *Report {
	rep := &Report{}
	im := &importer{spec: spec, opts: opts, res: &Result{}, names: map[string]string{}}
	type opT struct {
		method, ptr string
		t           *pathtmpl.Template
	}
	var ops []opT
	doc := spec.Doc
	docBase := im.basePath(doc.Servers, "#/servers", "")
	for _, p := range sortedPaths(doc.Paths) {
		item := doc.Paths.Value(p)
		ptr := "#/paths/" + escapePointer(p)
		itemBase := im.basePath(item.Servers, ptr+"/servers", docBase)
		for m, o := range item.Operations() {
			optr := opPointer(ptr, m)
			base := itemBase
			if o.Servers != nil {
				base = im.basePath(*o.Servers, optr+"/servers", itemBase)
			}
			if opts.BasePath != "" {
				base = opts.BasePath
			}
			cp, err := ConvertPath(base, p)
			if err != nil {
				im.problem(optr, "not checked: %v", err)
				continue
			}
			ops = append(ops, opT{m, optr, pathtmpl.MustParse(cp.Template)})
		}
	}
	rep.Problems = im.res.Problems
	entries := make([]pathtmpl.Entry, 0, len(routes))
	tmpls := make([]*pathtmpl.Template, len(routes))
	for i, r := range routes {
		t, err := pathtmpl.Parse(r.Path)
		if err != nil {
			rep.Problems = append(rep.Problems, Problem{Pointer: fmt.Sprintf(" (route %q)", r.Name), Msg: err.Error()})
			continue
		}
		tmpls[i] = t
		entries = append(entries, pathtmpl.Entry{Method: r.Method, Template: t, Index: i})
	}
	table, err := pathtmpl.NewTable(entries)
	if err != nil {
		rep.Problems = append(rep.Problems, Problem{Pointer: " (routes)", Msg: err.Error()})
		return rep
	}
	// Deterministic order: by pointer.
	sortOps := func(a, b opT) int { return strings.Compare(a.ptr, b.ptr) }
	slices.SortFunc(ops, sortOps)
	for _, o := range ops {
		if !writeMethods[o.method] {
			continue
		}
		rep.Writes++
		f := Finding{Method: o.method, Path: o.t.String(), Pointer: o.ptr}
		i, ok := table.Lookup(o.method, samplePath(o.t))
		switch {
		case !ok:
			f.Msg = "no route matches this write"
		case !routes[i].Idempotent:
			f.Route, f.Msg = routes[i].Name, fmt.Sprintf("route %q matches it, but is not idempotent", routes[i].Name)
		case routes[i].Observe:
			f.Route, f.Msg = routes[i].Name, fmt.Sprintf("route %q matches it, but is in observe mode (nothing is enforced)", routes[i].Name)
		default:
			continue
		}
		rep.Unprotected = append(rep.Unprotected, f)
	}
	for i, r := range routes {
		if tmpls[i] == nil {
			continue
		}
		found := false
		for _, o := range ops {
			if _, ok := pathtmpl.Overlap(tmpls[i], o.t); ok && o.method == r.Method {
				found = true
				break
			}
		}
		if !found {
			rep.Unmatched = append(rep.Unmatched, Finding{Method: r.Method, Path: r.Path, Route: r.Name, Msg: "matches no operation of the document"})
		}
	}
	return rep
}

// samplePath is t with each parameter replaced by a value no literal
// segment of an API is likely to equal.
func samplePath(t *pathtmpl.Template) string {
	segs := strings.Split(t.String(), "/")
	for i, s := range segs {
		if strings.HasPrefix(s, "{") {
			segs[i] = fmt.Sprintf("~sample%d~", i)
		}
	}
	return strings.Join(segs, "/")
}

// RoutesOf converts a config's routes for [Against].
func RoutesOf(cfg *config.Config) []Route {
	out := make([]Route, len(cfg.Routes))
	for i, r := range cfg.Routes {
		out[i] = Route{Name: r.Name, Method: r.Method, Path: r.Path, Idempotent: r.Idempotent,
			Observe: r.EffectiveMode(cfg.Mode) == config.ModeObserve}
	}
	return out
}

// RunAgainst runs `idemgate validate --against SPEC` for the loaded,
// valid cfg read from configPath: it prints every unprotected write
// operation and every route that matches no operation to stdout, one line
// each, then a summary, and returns an error when there was any.
func RunAgainst(specPath, configPath string, cfg *config.Config, stdout, stderr io.Writer) error {
	spec, err := LoadSpec(specPath)
	if err != nil {
		return err
	}
	rep := Against(spec, RoutesOf(cfg), Options{})
	for _, p := range rep.Problems {
		fmt.Fprintln(stderr, specPath+p.String())
	}
	for _, f := range rep.Unprotected {
		fmt.Fprintln(stdout, "unprotected: "+f.String())
	}
	for _, f := range rep.Unmatched {
		fmt.Fprintln(stdout, "unmatched: "+f.String())
	}
	fmt.Fprintf(stdout, "%s against %s: %d of %d write operations protected; %d of %d routes match no operation\n",
		configPath, specPath, rep.Writes-len(rep.Unprotected), rep.Writes, len(rep.Unmatched), len(cfg.Routes))
	if len(rep.Unprotected) > 0 || len(rep.Unmatched) > 0 {
		return fmt.Errorf("%s does not cover %s: %d unprotected writes, %d unmatched routes", configPath, specPath, len(rep.Unprotected), len(rep.Unmatched))
	}
	return nil
}
