// Package problem writes the answers idemgate makes itself, on the proxy's
// listener and on the admin API: RFC 9457 problem documents with a stable
// code and the request's ID. The body's shape is a [Shape]: [JSON]
// (application/problem+json) unless a route asks for another (GraphQL
// routes answer in GraphQL's errors shape). Every such answer goes through
// [Write]: a new shape plugs in there and nowhere else.
package problem

import (
	"net/http"
	"strconv"
)

// Problem is one answer's content. Nothing internal goes into it: the
// cause of a failure is logged, never sent.
type Problem struct {
	Status     int
	Code       string // stable, e.g. idempotency_key_reused
	Title      string
	Detail     string
	RetryAfter string // the Retry-After header value; "" for none
}

// WithRetryAfter returns p with its Retry-After header set to secs.
func (p Problem) WithRetryAfter(secs int) Problem {
	p.RetryAfter = strconv.Itoa(secs)
	return p
}

// Shape renders a problem as a body of its media type.
type Shape interface {
	// ContentType is the body's media type.
	ContentType() string
	// AppendBody appends p's body, carrying requestID, to b.
	AppendBody(b []byte, p Problem, requestID string) []byte
}

// JSON is the default shape: application/problem+json with type, title,
// status, code, detail and request_id.
type JSON struct{}

// ContentType implements [Shape].
func (JSON) ContentType() string { return "application/problem+json" }

// AppendBody implements [Shape].
func (JSON) AppendBody(b []byte, p Problem, requestID string) []byte {
	b = append(b, `{"type":`...)
	b = strconv.AppendQuote(b, "urn:idemgate:problem:"+p.Code)
	b = append(b, `,"title":`...)
	b = strconv.AppendQuote(b, p.Title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(p.Status), 10)
	b = append(b, `,"code":`...)
	b = strconv.AppendQuote(b, p.Code)
	b = append(b, `,"detail":`...)
	b = strconv.AppendQuote(b, p.Detail)
	b = append(b, `,"request_id":`...)
	b = strconv.AppendQuote(b, requestID)
	return append(b, "}\n"...)
}

// Write answers r with p in shape s (nil: [JSON]). The answer is never
// cached, and a HEAD request gets the headers only.
func Write(w http.ResponseWriter, r *http.Request, s Shape, p Problem, requestID string) {
	if s == nil {
		s = JSON{}
	}
	var ctype string
	var body []byte
	if rs, ok := s.(Renderer); ok {
		ctype, body = rs.Render(make([]byte, 0, 256), p, requestID)
	} else {
		ctype, body = s.ContentType(), s.AppendBody(make([]byte, 0, 256), p, requestID)
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Cache-Control", "no-store")
	if p.RetryAfter != "" {
		h.Set("Retry-After", p.RetryAfter)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(p.Status)
	if r.Method != http.MethodHead {
		w.Write(body)
	}
}
