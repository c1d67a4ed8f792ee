package openapi

import (
	"fmt"
	"math"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/idemgate/idemgate/internal/pathtmpl"
)

// Route is one generated route. Its fields mirror config.Route's keys (and
// the per-route keys DESIGN.md plans: retention, in_progress, rate_limit.by),
// kept as the document wrote them, so the YAML the importer prints reads like
// a hand-written config.
type Route struct {
	Name       string
	Method     string
	Path       string
	Idempotent bool
	RequireKey bool
	Protocol   string // "" or "graphql"
	// SessionParam or SessionHeader: at most one is set.
	SessionParam      string
	SessionHeader     string
	FingerprintIgnore []string
	Retention         string // a Go duration, as written
	InProgress        string // "reject" or "wait"
	RateLimit         *RateLimit

	// Observe is set for a config route in observe mode (see [RoutesOf]);
	// the importer never sets it.
	Observe bool

	// Pointer is the JSON pointer of the operation in the document.
	Pointer string
	// SpecPath is the operation's path as the document writes it.
	SpecPath string
}

// RateLimit is a route's rate_limit.
type RateLimit struct {
	Requests  int
	Per       string // a Go duration
	Algorithm string // "", "token_bucket" or "window"
	Block     string // a Go duration, only with "window"
	By        string // "", "client_ip", "identity" or "header:NAME"
}

// Problem is something the importer could not express exactly: an
// ambiguous or unsupported construct of the document.
type Problem struct {
	// Pointer is the JSON pointer of the operation or element, like
	// "#/paths/~1pets~1{id}/post".
	Pointer string
	// Msg says what happened, one line.
	Msg string
}

func (p Problem) String() string { return p.Pointer + ": " + p.Msg }

// Options configure [Import]. The zero value is usable.
type Options struct {
	// BasePath, when set, replaces the base path taken from the document's
	// servers (OpenAPI 3) or basePath (Swagger 2.0). "/" means none.
	BasePath string
	// KeyHeader is the idempotency key header whose declaration as a
	// required parameter gives require_key. Default "Idempotency-Key".
	KeyHeader string
}

// Result is what [Import] derived from a document.
type Result struct {
	// Routes in a stable order: by path, then method.
	Routes []Route
	// PathCaseSensitive is set when two of the document's paths differ
	// only in case: the config then needs path_case: sensitive.
	PathCaseSensitive bool
	// Problems, in the order of the document's paths and methods.
	Problems []Problem
	// Operations is the number of operations read; Writes those with a
	// write method.
	Operations, Writes int
}

// writeMethods become idempotent routes; safeMethods become routes only when
// an extension asks for a session or a limit.
var (
	writeMethods = map[string]bool{http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true}
	safeMethods  = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodOptions: true, http.MethodTrace: true, openapi3.MethodQuery: true}
	methodOrder  = []string{http.MethodGet, http.MethodHead, openapi3.MethodQuery, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions, http.MethodTrace, http.MethodConnect}
)

func methodRank(m string) int {
	if i := slices.Index(methodOrder, m); i >= 0 {
		return i
	}
	return len(methodOrder)
}

// Import derives routes from spec. It never fails: what it cannot express is
// a [Problem] in the result.
func Import(spec *Spec, opts Options) *Result {
	if opts.KeyHeader == "" {
		opts.KeyHeader = "Idempotency-Key"
	}
	im := &importer{spec: spec, opts: opts, res: &Result{}, names: map[string]string{}}
	im.run()
	return im.res
}

type importer struct {
	spec    *Spec
	opts    Options
	res     *Result
	names   map[string]string // route name → pointer of its operation
	docBase string
}

func (im *importer) problem(ptr, format string, args ...any) {
	im.res.Problems = append(im.res.Problems, Problem{Pointer: ptr, Msg: fmt.Sprintf(format, args...)})
}

// op is one operation being converted.
type op struct {
	method, specPath, ptr string
	item                  *openapi3.PathItem
	op                    *openapi3.Operation
	path                  convertedPath
}

func (im *importer) run() {
	doc := im.spec.Doc
	im.docBase = im.basePath(doc.Servers, "#/servers", "")
	var ops []op
	misplaced := func(ext map[string]any, ptr string) {
		for _, k := range []string{"x-idempotency", "x-ratelimit"} {
			if _, ok := ext[k]; ok {
				im.problem(ptr+"/"+k, "is read on operations only; ignored here (put it on each operation)")
			}
		}
	}
	misplaced(doc.Extensions, "#")
	for _, p := range sortedPaths(doc.Paths) {
		item := doc.Paths.Value(p)
		ptr := "#/paths/" + escapePointer(p)
		misplaced(item.Extensions, ptr)
		itemBase := im.basePath(item.Servers, ptr+"/servers", im.docBase)
		operations := item.Operations()
		methods := make([]string, 0, len(operations))
		for m := range operations {
			methods = append(methods, m)
		}
		slices.SortFunc(methods, func(a, b string) int { return methodRank(a) - methodRank(b) })
		for _, m := range methods {
			o := operations[m]
			optr := opPointer(ptr, m)
			im.res.Operations++
			if writeMethods[m] {
				im.res.Writes++
			}
			base := itemBase
			if o.Servers != nil {
				base = im.basePath(*o.Servers, optr+"/servers", itemBase)
			}
			if im.opts.BasePath != "" {
				base = im.opts.BasePath
			}
			cp, err := ConvertPath(base, p)
			if err != nil {
				im.problem(optr, "not imported: %v", err)
				continue
			}
			for _, n := range cp.Notes {
				im.problem(optr, "%s", n)
			}
			for name := range o.Callbacks {
				im.problem(optr+"/callbacks/"+escapePointer(name), "callbacks are requests the API makes, not routes; not imported")
			}
			ops = append(ops, op{method: m, specPath: p, ptr: optr, item: item, op: o, path: cp})
		}
	}
	for name := range doc.Webhooks {
		im.problem("#/webhooks/"+escapePointer(name), "webhooks are requests the API makes, not routes; not imported")
	}
	im.res.PathCaseSensitive = casesDiffer(ops)
	var routes []Route
	for i := range ops {
		if r, ok := im.route(&ops[i]); ok {
			routes = append(routes, r)
		}
	}
	slices.SortStableFunc(routes, func(a, b Route) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return methodRank(a.Method) - methodRank(b.Method)
	})
	im.res.Routes = im.dedupe(routes)
}

// fixedMethod reports whether m is one of the path item's fixed fields.
// opPointer is the JSON pointer of the operation m of the path item at ptr.
func opPointer(ptr, m string) string {
	if !fixedMethod(m) {
		return ptr + "/additionalOperations/" + escapePointer(m)
	}
	return ptr + "/" + strings.ToLower(m)
}

func fixedMethod(m string) bool {
	switch m {
	case http.MethodConnect, http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodOptions,
		http.MethodPatch, http.MethodPost, http.MethodPut, http.MethodTrace, openapi3.MethodQuery:
		return true
	}
	return false
}

func sortedPaths(p *openapi3.Paths) []string {
	keys := make([]string, 0, p.Len())
	for k := range p.Map() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// basePath is the path of the first server's URL (server variables replaced
// by their defaults), or inherit when servers is empty. Servers with
// different base paths are a problem: the first one is used.
func (im *importer) basePath(servers openapi3.Servers, ptr, inherit string) string {
	if len(servers) == 0 {
		return inherit
	}
	var first string
	for i, s := range servers {
		if s == nil {
			continue
		}
		u := s.URL
		for name, v := range s.Variables {
			if v == nil {
				continue
			}
			if len(v.Enum) > 1 && strings.Contains(pathOfURL(s.URL), "{"+name+"}") {
				im.problem(fmt.Sprintf("%s/%d/variables/%s", ptr, i, escapePointer(name)), "the base path has a variable with several values; its default %q is used (give --base-path to choose)", v.Default)
			}
			u = strings.ReplaceAll(u, "{"+name+"}", v.Default)
		}
		bp := pathOfURL(u)
		if i == 0 {
			first = bp
			continue
		}
		if bp != first {
			im.problem(fmt.Sprintf("%s/%d", ptr, i), "server base path %q differs from the first server's %q; the first is used (give --base-path to choose)", bp, first)
		}
	}
	return first
}

// pathOfURL is the (escaped) path of a server URL, absolute or relative.
func pathOfURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		// A URL with unreplaced variables in its host; cut after the host.
		if i := strings.Index(s, "://"); i >= 0 {
			s = s[i+3:]
			if j := strings.IndexByte(s, '/'); j >= 0 {
				return strings.TrimRight(s[j:], "/")
			}
			return ""
		}
		return strings.TrimRight(s, "/")
	}
	return strings.TrimRight(u.EscapedPath(), "/")
}

// casesDiffer reports whether two templates differ only in the case of
// their literal segments.
func casesDiffer(ops []op) bool {
	seen := map[string]string{}
	for _, o := range ops {
		t := pathtmpl.MustParse(o.path.Template)
		shape := shapeOf(t)
		folded := strings.ToLower(shape)
		if prev, ok := seen[folded]; ok && prev != shape {
			return true
		}
		seen[folded] = shape
	}
	return false
}

// shapeOf is a template with its parameter names erased: /a/{}/b.
func shapeOf(t *pathtmpl.Template) string {
	segs := strings.Split(t.String(), "/")
	for i, s := range segs {
		if strings.HasPrefix(s, "{") {
			segs[i] = "{}"
		}
	}
	return strings.Join(segs, "/")
}

// route converts one operation; ok is false when it gives no route.
func (im *importer) route(o *op) (Route, bool) {
	r := Route{Method: o.method, Path: o.path.Template, Pointer: o.ptr, SpecPath: o.specPath}
	write := writeMethods[o.method]
	if !write && !safeMethods[o.method] {
		im.problem(o.ptr, "method %s is neither a write (POST, PUT, PATCH, DELETE) nor a safe method; not imported", o.method)
		return r, false
	}
	x := im.readIdempotency(o, write)
	if x.optOut {
		im.problem(o.ptr, "x-idempotency is false: no route (the operation stays unprotected)")
		return r, false
	}
	rl := im.readRateLimit(o)
	if !write && x.sessionParam == "" && x.sessionHeader == "" && rl == nil {
		return r, false // a read no extension asks for
	}
	r.Idempotent = write
	r.RateLimit = rl
	r.SessionParam, r.SessionHeader = x.sessionParam, x.sessionHeader
	if write {
		r.FingerprintIgnore = x.fingerprintIgnore
		r.Retention = x.retention
		r.InProgress = x.inProgress
		r.RequireKey = im.requireKey(o, x)
	}
	r.Protocol = im.protocol(o, x)
	r.Name = im.name(o)
	return r, true
}

// name is the route's name: the operationId made valid (letters, digits,
// "_", "-", "."), or method_path; unique in the result.
func (im *importer) name(o *op) string {
	base := routeIdent(o.op.OperationID)
	if base == "" {
		base = strings.ToLower(o.method) + "_" + routeIdent(strings.NewReplacer("{", "", "}", "", "/", "_").Replace(strings.Trim(o.specPath, "/")))
		base = strings.TrimRight(base, "_")
	} else if base != o.op.OperationID {
		im.problem(o.ptr, "operationId %q has characters a route name cannot; named %q", o.op.OperationID, base)
	}
	n := base
	for i := 2; ; i++ {
		prev, taken := im.names[n]
		if !taken {
			break
		}
		if i == 2 {
			im.problem(o.ptr, "route name %q is also the name of %s; named %s_N", base, prev, base)
		}
		n = fmt.Sprintf("%s_%d", base, i)
	}
	im.names[n] = o.ptr
	return n
}

// routeIdent keeps [A-Za-z0-9_.-] and turns every other byte into "_".
func routeIdent(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			b[i] = '_'
		}
	}
	return string(b)
}

// dedupe drops a route whose method and template equal an earlier route's
// (two operations that convert to one template), and a route ambiguous with
// an earlier one, each with a problem. The earlier route then matches the
// dropped operation's requests.
func (im *importer) dedupe(routes []Route) []Route {
	out := routes[:0:0]
	var tmpls []*pathtmpl.Template
	for _, r := range routes {
		t := pathtmpl.MustParse(r.Path)
		dropped := false
		for j, q := range out {
			if q.Method != r.Method {
				continue
			}
			if shapeOf(tmpls[j]) == shapeOf(t) {
				im.problem(r.Pointer, "converts to %s %s like %s (route %s); not imported: that route protects it", r.Method, r.Path, q.Pointer, q.Name)
				dropped = true
				break
			}
			if pathtmpl.Ambiguous(tmpls[j], t) {
				ex, _ := pathtmpl.Overlap(tmpls[j], t)
				im.problem(r.Pointer, "%s %s and route %s (%s %s) both match %s equally; not imported: write a more specific route by hand", r.Method, r.Path, q.Name, q.Method, q.Path, ex)
				dropped = true
				break
			}
		}
		if !dropped {
			out = append(out, r)
			tmpls = append(tmpls, t)
		}
	}
	return out
}

// requireKey: the operation declares the key header as a required
// parameter, or x-idempotency.required says so (it wins when they differ).
func (im *importer) requireKey(o *op, x xIdempotency) bool {
	declared, required := false, false
	for _, p := range parameters(o) {
		if p.In == openapi3.ParameterInHeader && strings.EqualFold(p.Name, im.opts.KeyHeader) {
			declared, required = true, p.Required
		}
	}
	if x.required != nil {
		if declared && *x.required != required {
			im.problem(o.ptr, "x-idempotency.required is %t but the %s parameter has required: %t; the extension wins", *x.required, im.opts.KeyHeader, required)
		}
		return *x.required
	}
	return required
}

// parameters are the path item's parameters overridden by the operation's.
func parameters(o *op) []*openapi3.Parameter {
	var out []*openapi3.Parameter
	idx := map[string]int{}
	for _, list := range []openapi3.Parameters{o.item.Parameters, o.op.Parameters} {
		for _, pr := range list {
			if pr == nil || pr.Value == nil {
				continue
			}
			k := pr.Value.In + "\x00" + strings.ToLower(pr.Value.Name)
			if i, ok := idx[k]; ok {
				out[i] = pr.Value
				continue
			}
			idx[k] = len(out)
			out = append(out, pr.Value)
		}
	}
	return out
}

// protocol is graphql when the operation accepts application/graphql or
// x-idempotency.protocol says so. A JSON body with a "query" member is not
// enough: REST APIs have those too.
func (im *importer) protocol(o *op, x xIdempotency) string {
	if x.protocol != "" {
		return x.protocol
	}
	if rb := o.op.RequestBody; rb != nil && rb.Value != nil {
		for ct := range rb.Value.Content {
			if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/graphql" {
				return "graphql"
			}
		}
	}
	return ""
}

// xIdempotency is the operation's x-idempotency extension.
type xIdempotency struct {
	optOut                      bool
	required                    *bool
	sessionParam, sessionHeader string
	fingerprintIgnore           []string
	retention, inProgress       string
	protocol                    string
}

func (im *importer) readIdempotency(o *op, write bool) xIdempotency {
	var x xIdempotency
	raw, ok := o.op.Extensions["x-idempotency"]
	if !ok {
		return x
	}
	ptr := o.ptr + "/x-idempotency"
	switch v := raw.(type) {
	case bool:
		x.optOut = !v
		return x
	case map[string]any:
		for _, k := range sortedKeys(v) {
			val := v[k]
			kp := ptr + "/" + escapePointer(k)
			writeOnly := func() bool {
				if !write {
					im.problem(kp, "applies to writes only; ignored on %s", o.method)
				}
				return write
			}
			switch k {
			case "required":
				b, ok := val.(bool)
				if !ok {
					im.problem(kp, "want true or false; got %v; ignored", val)
				} else if writeOnly() {
					x.required = &b
				}
			case "session":
				im.readSession(o, kp, val, &x)
			case "fingerprint_ignore":
				ptrs, ok := stringList(val)
				if !ok {
					im.problem(kp, "want a list of JSON pointers; got %v; ignored", val)
					continue
				}
				var good []string
				for _, p := range ptrs {
					if err := checkPointer(p); err != nil {
						im.problem(kp, "%q is not an RFC 6901 JSON pointer (%v); ignored", p, err)
						continue
					}
					good = append(good, p)
				}
				if writeOnly() {
					x.fingerprintIgnore = good
				}
			case "retention":
				d, ok := durationValue(val)
				if !ok || d <= 0 {
					im.problem(kp, "want a positive duration like \"48h\"; got %v; ignored", val)
				} else if writeOnly() {
					x.retention = d.String()
					if s, isStr := val.(string); isStr {
						x.retention = s
					}
				}
			case "in_progress":
				s, _ := val.(string)
				if s != "reject" && s != "wait" {
					im.problem(kp, "want \"reject\" or \"wait\"; got %v; ignored", val)
				} else if writeOnly() {
					x.inProgress = s
				}
			case "protocol":
				if s, _ := val.(string); s != "graphql" {
					im.problem(kp, "want \"graphql\"; got %v; ignored", val)
				} else {
					x.protocol = s
				}
			default:
				im.problem(kp, "unknown key; ignored (known: required, session, fingerprint_ignore, retention, in_progress, protocol)")
			}
		}
	default:
		im.problem(ptr, "want an object or a boolean; got %v; ignored", raw)
	}
	return x
}

func (im *importer) readSession(o *op, kp string, val any, x *xIdempotency) {
	param := func(name string) {
		if n, ok := o.path.Params[name]; ok {
			x.sessionParam = n
			return
		}
		im.problem(kp, "names parameter %q, but path %q has no {%s}; ignored", name, o.specPath, name)
	}
	switch v := val.(type) {
	case string:
		param(v)
	case map[string]any:
		h, hok := v["header"].(string)
		p, pok := v["param"].(string)
		switch {
		case len(v) == 1 && hok && validHeader(h):
			x.sessionHeader = http.CanonicalHeaderKey(h)
		case len(v) == 1 && pok:
			param(p)
		default:
			im.problem(kp, "want a path parameter name or {header: NAME}; got %v; ignored", val)
		}
	default:
		im.problem(kp, "want a path parameter name or {header: NAME}; got %v; ignored", val)
	}
}

func (im *importer) readRateLimit(o *op) *RateLimit {
	raw, ok := o.op.Extensions["x-ratelimit"]
	if !ok {
		return nil
	}
	ptr := o.ptr + "/x-ratelimit"
	v, ok := raw.(map[string]any)
	if !ok {
		im.problem(ptr, "want an object {requests, per, algorithm, by}; got %v; ignored", raw)
		return nil
	}
	rl := &RateLimit{}
	for _, k := range sortedKeys(v) {
		val := v[k]
		kp := ptr + "/" + escapePointer(k)
		switch k {
		case "requests":
			f, ok := val.(float64)
			if !ok || f < 1 || f != math.Trunc(f) || f > math.MaxInt32 {
				im.problem(kp, "want a whole number > 0; got %v", val)
				return nil
			}
			rl.Requests = int(f)
		case "per", "block":
			d, ok := durationValue(val)
			if !ok || d <= 0 {
				im.problem(kp, "want a positive duration like \"60s\" (a number means seconds); got %v", val)
				return nil
			}
			s := d.String()
			if str, isStr := val.(string); isStr {
				s = str
			}
			if k == "per" {
				rl.Per = s
			} else {
				rl.Block = s
			}
		case "algorithm":
			s, _ := val.(string)
			if s != "token_bucket" && s != "window" {
				im.problem(kp, "want \"token_bucket\" or \"window\"; got %v", val)
				return nil
			}
			rl.Algorithm = s
		case "by":
			s, _ := val.(string)
			h, isHeader := strings.CutPrefix(s, "header:")
			switch {
			case s == "client_ip":
			case s == "identity":
				im.problem(kp, "by: identity counts verified JWT identities only: the config needs idempotency.identity.jwt")
			case isHeader && validHeader(h):
				s = "header:" + http.CanonicalHeaderKey(h)
			default:
				im.problem(kp, "want \"client_ip\", \"identity\" or \"header:NAME\"; got %v", val)
				return nil
			}
			rl.By = s
		default:
			im.problem(kp, "unknown key; the limit is ignored (known: requests, per, algorithm, by, block)")
			return nil
		}
	}
	switch {
	case rl.Requests == 0 || rl.Per == "":
		im.problem(ptr, "requests and per are both required; the limit is ignored")
		return nil
	case rl.Block != "" && rl.Algorithm != "window":
		im.problem(ptr+"/block", "only algorithm \"window\" blocks; the limit is ignored")
		return nil
	}
	return rl
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func stringList(v any) ([]string, bool) {
	switch v := v.(type) {
	case string:
		return []string{v}, true
	case []any:
		out := make([]string, 0, len(v))
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}

// durationValue reads a Go duration string, or a number of seconds.
func durationValue(v any) (time.Duration, bool) {
	switch v := v.(type) {
	case string:
		d, err := time.ParseDuration(v)
		return d, err == nil
	case float64:
		if v != math.Trunc(v) || v > float64(math.MaxInt64/int64(time.Second)) {
			return 0, false
		}
		return time.Duration(v) * time.Second, true
	}
	return 0, false
}

// checkPointer checks an RFC 6901 JSON pointer.
func checkPointer(p string) error {
	if p == "" {
		return nil
	}
	if p[0] != '/' {
		return fmt.Errorf("must start with \"/\"")
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '~' && (i+1 >= len(p) || p[i+1] != '0' && p[i+1] != '1') {
			return fmt.Errorf("\"~\" must be followed by 0 or 1")
		}
	}
	return nil
}

// validHeader reports whether h is an HTTP token (a header name).
func validHeader(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}
