package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/keystore/memstore"
)

// TestKeySyntaxFamilies: each key_syntax accepts and refuses what DESIGN.md
// step 4 and Profiles say, and an sf-string's key is the string's value.
func TestKeySyntaxFamilies(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", 255)
	tests := []struct {
		syntax KeySyntax
		value  string
		key    string // "" refused
	}{
		{KeyStrict, "abc-123", "abc-123"},
		{KeyStrict, "!~", "!~"},
		{KeyStrict, long, long},
		{KeyStrict, long + "k", ""},
		{KeyStrict, "order 1001", ""},
		{KeyStrict, "caf\u00e9", ""},
		{KeyStrict, "a\tb", ""},
		{KeyStrict, `"abc"`, `"abc"`},

		{KeyPrintable, "order 1001", "order 1001"},
		{KeyPrintable, "a  b ~!", "a  b ~!"},
		{KeyPrintable, "abc-123", "abc-123"},
		{KeyPrintable, long, long},
		{KeyPrintable, long + "k", ""},
		{KeyPrintable, " lead", ""},
		{KeyPrintable, "trail ", ""},
		{KeyPrintable, " ", ""},
		{KeyPrintable, "a\tb", ""},
		{KeyPrintable, "a\x7fb", ""},
		{KeyPrintable, "caf\u00e9", ""},

		{KeySFString, `"abc"`, "abc"},
		{KeySFString, `"8e03978e-40d5-43e8-bc93-6894a57f9324"`, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{KeySFString, `"order 1001"`, "order 1001"},
		{KeySFString, `"a\"b\\c"`, `a"b\c`},
		{KeySFString, `"abc";v=1`, "abc"},
		{KeySFString, ` "abc" `, "abc"},
		{KeySFString, `"` + long + `"`, long},
		{KeySFString, `"` + long + `k"`, ""},
		// A bare value is a strict key (the conformance vectors' form).
		{KeySFString, `abc`, "abc"},
		{KeySFString, `k-concurrent-1`, "k-concurrent-1"},
		{KeySFString, `8e03978e-40d5-43e8-bc93-6894a57f9324`, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{KeySFString, long, long},
		{KeySFString, long + "k", ""},
		{KeySFString, `order 1001`, ""},
		{KeySFString, "caf\u00e9", ""},
		{KeySFString, ` "abc`, ""},
		{KeySFString, `""`, ""},
		{KeySFString, `"abc`, ""},
		{KeySFString, `"abc" "def"`, ""},
		{KeySFString, `"a\nb"`, ""},
		{KeySFString, "\"caf\u00e9\"", ""},
		{KeySFString, `123`, "123"},
		{KeySFString, `"abc", "def"`, ""},
	}
	for _, tc := range tests {
		key, ok := tc.syntax.Key(tc.value)
		if want := tc.key != ""; ok != want || (ok && key != tc.key) {
			t.Errorf("%s.Key(%q) = %q, %v; want %q, %v", tc.syntax, tc.value, key, ok, tc.key, want)
		}
	}
	for _, name := range []string{"strict", "printable", "sf-string", ""} {
		s, err := ParseKeySyntax(name)
		if err != nil || (name != "" && s.String() != name) {
			t.Errorf("ParseKeySyntax(%q) = %v, %v", name, s, err)
		}
	}
	if _, err := ParseKeySyntax("loose"); err == nil {
		t.Error("ParseKeySyntax(loose) succeeded")
	}
}

// TestKeySyntaxThroughTheProxy: the stages' key_syntax decides the 400, and
// under sf-string two spellings of one string (and a bare key and its
// quoted form) are one key.
func TestKeySyntaxThroughTheProxy(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	for _, tc := range []struct {
		syntax       KeySyntax
		first, retry string
		refused      string
	}{
		{KeyStrict, "order-1001", "order-1001", "order 1001"},
		{KeyPrintable, "order 1001", "order 1001", "caf\u00e9 1"},
		{KeySFString, `"order 1001"`, `"order 1001";x=1`, `"order-1001`},
		{KeySFString, `order-1001`, `"order-1001"`, `order 1001`},
	} {
		tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Stages.KeySyntax = tc.syntax })
		first := tp.do(t, "POST", "/ucp/v1/carts", tc.first, `{"a":1}`)
		retry := tp.do(t, "POST", "/ucp/v1/carts", tc.retry, `{"a":1}`)
		if first.status != 201 || retry.status != 201 || retry.header.Get("Idempotent-Replayed") != "true" || string(retry.body) != string(first.body) {
			t.Errorf("%s: first %v, retry %v; want the retry replayed", tc.syntax, first, retry)
		}
		req, _ := http.NewRequest("POST", tp.URL+"/ucp/v1/carts", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", tc.refused)
		res, err := tp.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if r := readResult(t, res); r.status != 400 || problemCode(t, r) != "idempotency_key_invalid" || !strings.Contains(string(r.body), "Idempotency-Key is not valid") {
			t.Errorf("%s: key %q = %v; want 400 idempotency_key_invalid", tc.syntax, tc.refused, r)
		}
	}
}

// TestRequestIDHeader: request_id_header names the header a request ID is
// read from, forwarded in and answered with; replays carry this request's
// ID; X-Request-Id is then an ordinary header.
func TestRequestIDHeader(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("X-Seen-Request-Id", r.Header.Get("Request-Id"))
		w.Header().Set("Request-Id", "upstream-id")
		w.WriteHeader(201)
	}
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Stages.RequestIDHeader = "request-id" })
	r := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`, "Request-Id", "req_first", "X-Request-Id", "other")
	// A live answer keeps the upstream's own request ID (DESIGN.md,
	// Hardening); a replay carries the retry's.
	if r.status != 201 || r.header.Get("Request-Id") != "upstream-id" || r.header.Get("X-Seen-Request-Id") != "req_first" {
		t.Errorf("first = %v %v; want Request-Id req_first forwarded, the upstream's own answered", r, r.header)
	}
	if got := up.last.Header.Get("X-Request-Id"); got != "other" {
		t.Errorf("upstream saw X-Request-Id %q; want it forwarded untouched", got)
	}
	r = tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`, "Request-Id", "req_retry")
	if r.header.Get("Idempotent-Replayed") != "true" || r.header.Get("Request-Id") != "req_retry" {
		t.Errorf("replay = %v %v; want Request-Id req_retry", r, r.header)
	}
	r = tp.do(t, "POST", "/ucp/v1/carts", "", `{}`)
	if id := r.header.Get("Request-Id"); id == "" || r.header.Get("X-Request-Id") != "" {
		t.Errorf("without a request ID: Request-Id %q, X-Request-Id %q; want a generated Request-Id only", id, r.header.Get("X-Request-Id"))
	}
	r = tp.do(t, "POST", "/ucp/v1/carts", "bad key", `{}`, "Request-Id", "req_bad")
	if r.status != 400 || r.header.Get("Request-Id") != "req_bad" || !strings.Contains(string(r.body), `"request_id":"req_bad"`) {
		t.Errorf("problem = %v %v; want its request_id from Request-Id", r, r.header)
	}
	if tp.p.RequestIDHeader() != "Request-Id" {
		t.Errorf("RequestIDHeader() = %q", tp.p.RequestIDHeader())
	}
}
