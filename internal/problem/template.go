package problem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
)

// Spec is an `errors` section of the configuration (DESIGN.md, "Error
// shapes"): how idemgate's own answers look to the clients of the API it
// fronts. The zero Spec keeps problem+json with idemgate's codes.
type Spec struct {
	// Codes renames codes of DESIGN.md's error table, e.g.
	// idempotency_key_invalid → invalid_request.
	Codes map[string]string
	// ContentType is the body's media type; "" means
	// application/problem+json without Body, application/json with it.
	ContentType string
	// Body is a text/template of the whole body with .Status, .Code (the
	// renamed code), .Title, .Detail, .RequestID and the function json.
	// "" keeps problem+json's body (with the renamed code). Every value
	// is escaped for ContentType: JSON-escaped for JSON types (an action
	// ending in json is left as it is), by html/template for text/html,
	// with <>&'" as references for XML types (see escape.go).
	Body string
	// Extensions is a text/template of a JSON object merged into a GraphQL
	// error's extensions (GraphQL routes only), e.g. {"class":"CONFLICT"}.
	Extensions string
}

// Merge returns route over s: the route's codes added to (and replacing)
// s's, and each of its other fields when set.
func (s Spec) Merge(route Spec) Spec {
	out := s
	if len(route.Codes) > 0 {
		out.Codes = maps.Clone(s.Codes)
		if out.Codes == nil {
			out.Codes = make(map[string]string, len(route.Codes))
		}
		maps.Copy(out.Codes, route.Codes)
	}
	if route.ContentType != "" {
		out.ContentType = route.ContentType
	}
	if route.Body != "" {
		out.Body = route.Body
	}
	if route.Extensions != "" {
		out.Extensions = route.Extensions
	}
	return out
}

// Data is what a body template sees.
type Data struct {
	Status    int
	Code      string
	Title     string
	Detail    string
	RequestID string
}

// sample is the problem a template is executed with at load.
var sample = Data{Status: 409, Code: "idempotency_in_progress", Title: "Request in \"progress\"", Detail: "A <request> with this key\nis still running", RequestID: "0123456789ab-1"}

// Template is a compiled [Spec]. It is safe for concurrent use.
type Template struct {
	codes       map[string]string
	contentType string
	body        executor // nil: problem+json's body
	ext         executor // nil: no extensions
	jsonBody    bool
	failures    atomic.Uint64
}

// Compile parses s's templates and executes them once with sample values:
// a body whose content type is JSON must yield valid JSON, and extensions
// a JSON object. The error names the failing field ("body",
// "content_type", "extensions", "codes").
func Compile(s Spec) (*Template, error) {
	t := &Template{codes: s.Codes, contentType: s.ContentType}
	for from, to := range s.Codes {
		if from == "" || to == "" {
			return nil, fmt.Errorf("codes: %q → %q: neither may be empty", from, to)
		}
	}
	if t.contentType == "" {
		t.contentType = "application/problem+json"
		if s.Body != "" {
			t.contentType = "application/json"
		}
	}
	esc, err := escapingOf(t.contentType)
	if err != nil {
		return nil, fmt.Errorf("content_type: %q: %v", t.contentType, err)
	}
	t.jsonBody = esc == escapeJSON
	if s.Body != "" {
		var out []byte
		if t.body, out, err = t.compileOne("body", s.Body, esc); err != nil {
			return nil, err
		}
		if t.jsonBody && !json.Valid(out) {
			return nil, fmt.Errorf("body: content_type %s, but the template's output for a sample problem is not valid JSON: %s", t.contentType, out)
		}
	} else if !t.jsonBody {
		return nil, fmt.Errorf("content_type: %s without a body template: problem+json's body is JSON", t.contentType)
	}
	if s.Extensions != "" {
		var out []byte
		if t.ext, out, err = t.compileOne("extensions", s.Extensions, escapeJSON); err != nil {
			return nil, err
		}
		var obj map[string]any
		if err := json.Unmarshal(out, &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("extensions: the template's output for a sample problem is not a JSON object: %s", out)
		}
	}
	return t, nil
}

// compileOne parses the template src of the field name and returns it
// with its output for the sample problem; the error names the field.
func (t *Template) compileOne(name, src string, esc escaping) (executor, []byte, error) {
	tm, err := parseEscaped(name, src, esc)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", name, err)
	}
	out, err := t.execute(tm, sample)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %v", name, err)
	}
	return tm, out, nil
}

func (t *Template) execute(tm executor, d Data) ([]byte, error) {
	var buf bytes.Buffer
	if err := tm.Execute(&buf, d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Code returns code as renamed by the spec.
func (t *Template) Code(code string) string {
	if t != nil {
		if to, ok := t.codes[code]; ok {
			return to
		}
	}
	return code
}

// Failures returns how many times a template failed at run time (each
// answered with problem+json instead).
func (t *Template) Failures() uint64 { return t.failures.Load() }

// ErrTemplate wraps a run-time template failure passed to a [Custom]'s
// OnError.
var ErrTemplate = errors.New("problem: error template failed")

// Extensions returns the GraphQL extensions the spec adds for p (nil
// when none), p's code already renamed. A failure is counted and returns
// nil with the error.
func (t *Template) Extensions(p Problem, requestID string) (map[string]any, error) {
	if t == nil || t.ext == nil {
		return nil, nil
	}
	out, err := t.execute(t.ext, data(p, requestID))
	var obj map[string]any
	if err == nil {
		err = json.Unmarshal(out, &obj)
	}
	if err != nil {
		t.failures.Add(1)
		return nil, fmt.Errorf("%w: extensions: %v", ErrTemplate, err)
	}
	return obj, nil
}

func data(p Problem, requestID string) Data {
	return Data{Status: p.Status, Code: p.Code, Title: p.Title, Detail: p.Detail, RequestID: requestID}
}

// Custom is the shape of a [Template]: its content type and body, with p's
// code renamed. A body template that fails (or yields invalid JSON for a
// JSON type) falls back to [JSON], is counted, and is reported to OnError.
type Custom struct {
	T       *Template
	OnError func(error)
}

// Render implements [Renderer].
func (c Custom) Render(b []byte, p Problem, requestID string) (string, []byte) {
	p.Code = c.T.Code(p.Code)
	if c.T.body == nil {
		return c.T.contentType, JSON{}.AppendBody(b, p, requestID)
	}
	out, err := c.T.execute(c.T.body, data(p, requestID))
	if err == nil && c.T.jsonBody && !json.Valid(out) {
		err = errors.New("output is not valid JSON")
	}
	if err != nil {
		c.T.failures.Add(1)
		if c.OnError != nil {
			c.OnError(fmt.Errorf("%w: body: %v", ErrTemplate, err))
		}
		return JSON{}.ContentType(), JSON{}.AppendBody(b, p, requestID)
	}
	return c.T.contentType, append(b, out...)
}

// Renderer is a shape that picks its content type as it renders (a
// template may fall back to problem+json). [Write] prefers it to [Shape].
type Renderer interface {
	Render(b []byte, p Problem, requestID string) (contentType string, body []byte)
}

// ContentType implements [Shape]; [Write] uses Render instead.
func (c Custom) ContentType() string { return c.T.contentType }

// AppendBody implements [Shape]; [Write] uses Render instead.
func (c Custom) AppendBody(b []byte, p Problem, requestID string) []byte {
	_, b = c.Render(b, p, requestID)
	return b
}

// Codes are the codes of DESIGN.md's error table: the codes a [Spec] may
// rename.
var Codes = []string{
	"idempotency_key_invalid", "idempotency_key_missing", "idempotency_identity_missing",
	"idempotency_identity_invalid", "tenant_unknown", "request_invalid", "request_timeout",
	"idempotency_in_progress", "idempotency_key_reused", "idempotency_response_too_large",
	"idempotency_outcome_unknown",
	"idempotency_unavailable", "session_busy", "overloaded", "rate_limited",
	"request_too_large", "request_body_invalid", "upstream_unavailable", "upstream_broken",
	"upstream_timeout", "internal",
}
