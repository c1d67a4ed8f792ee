package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	itestutil "github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

const token = "s3cret-token-for-tests-0123456789"

type fixture struct {
	srv   *httptest.Server
	store *memstore.Store
	clock *itestutil.Clock
	logs  *itestutil.SyncBuffer
	reg   *prometheus.Registry
}

func newFixture(t *testing.T, tok string, with ...func(*Options)) *fixture {
	t.Helper()
	clk := itestutil.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st := memstore.New(memstore.Options{Now: clk.Now})
	logs := &itestutil.SyncBuffer{}
	reg := prometheus.NewPedanticRegistry()
	o := Options{
		Store: st,
		Token: tok,
		ScopeKey: func(tenant string, id http.Header, claims map[string]json.RawMessage, key string) (keystore.Key, error) {
			if claims != nil {
				return keystore.Key{}, errors.New("claims given, but the identity has no JWT source")
			}
			return keystore.NewKey(tenant, id.Get("Authorization"), id.Get("Cookie"), key), nil
		},
		TenantFor: func(host string) (string, bool) {
			return "tenant-of-" + host, host != "unknown.example"
		},
		MaxResponseBytes: 64,
		DropHeaders:      []string{"set-cookie"},
		RouteDropHeaders: func(route string) ([]string, bool) {
			switch route {
			case "drops_order":
				return []string{"x-order"}, true
			case "drops_none":
				return []string{}, true
			}
			return nil, false
		},
		Registerer: reg,
		Logger:     slog.New(slog.NewJSONHandler(logs, nil)),
		Now:        clk.Now,
	}
	for _, w := range with {
		w(&o)
	}
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); st.Close() })
	return &fixture{srv: srv, store: st, clock: clk, logs: logs, reg: reg}
}

type reply struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// call sends a request with the given Authorization values ("" for none).
func (f *fixture) call(t *testing.T, method, path, body string, auth ...string) reply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range auth {
		req.Header.Add("Authorization", a)
	}
	res, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	a := reply{status: res.StatusCode, header: res.Header, raw: string(raw)}
	json.Unmarshal(raw, &a.body)
	return a
}

func (f *fixture) admin(t *testing.T, method, path, body string) reply {
	t.Helper()
	return f.call(t, method, path, body, "Bearer "+token)
}

func (f *fixture) claim(t *testing.T, name, route string) (keystore.Key, uint64) {
	t.Helper()
	k := keystore.NewKey(name)
	res, err := f.store.Reserve(context.Background(), k, keystore.ReserveOptions{
		Fingerprint: keystore.Fingerprint{1, 2, 3}, Route: route, Lease: 2 * time.Minute, Retention: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	return k, res.Token
}

func TestAuth(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token)
	for _, c := range []struct {
		name string
		auth []string
		want int
	}{
		{"no header", nil, 401},
		{"wrong token", []string{"Bearer nope"}, 401},
		{"token prefix", []string{"Bearer " + token[:10]}, 401},
		{"basic scheme", []string{"Basic " + token}, 401},
		{"two headers", []string{"Bearer " + token, "Bearer " + token}, 401},
		{"bare token", []string{token}, 401},
		{"right token", []string{"Bearer " + token}, 200},
		{"scheme case-insensitive", []string{"bearer " + token}, 200},
	} {
		// The test server is on loopback: loopback earns no trust.
		a := f.call(t, "GET", "/admin/claims", "", c.auth...)
		if a.status != c.want {
			t.Errorf("%s: %d %s; want %d", c.name, a.status, a.raw, c.want)
		}
		if a.status == 401 && a.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", c.name)
		}
	}
	// Unknown paths are refused before they are routed.
	if a := f.call(t, "GET", "/admin/nothing", ""); a.status != 401 {
		t.Errorf("unknown path without a token = %d; want 401", a.status)
	}
	if a := f.admin(t, "GET", "/admin/nothing", ""); a.status != 404 {
		t.Errorf("unknown path = %d; want 404", a.status)
	}
	if strings.Contains(f.logs.String(), token) {
		t.Errorf("the token reached the log")
	}
	if n := testutil.ToFloat64(mustCounter(t, f.reg, "idemgate_admin_requests_total", "auth", "401")); n != 7 {
		t.Errorf("auth refusals counted = %v; want 7", n)
	}
	if problems, err := testutil.GatherAndLint(f.reg); err != nil || len(problems) > 0 {
		t.Errorf("lint = %v, %v", problems, err)
	}
}

func TestDisabled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, "")
	for _, auth := range [][]string{nil, {"Bearer "}, {"Bearer x"}} {
		a := f.call(t, "GET", "/admin/claims", "", auth...)
		if a.status != 404 || a.body["code"] != "admin_disabled" {
			t.Errorf("disabled API with %q = %d %s; want 404 admin_disabled", auth, a.status, a.raw)
		}
	}
}

func TestListAndInspect(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token)
	old, _ := f.claim(t, "old", "pay")
	f.clock.Advance(10 * time.Minute)
	young, _ := f.claim(t, "young", "cart")
	done, tok := f.claim(t, "done", "cart")
	if err := f.store.Complete(context.Background(), done, tok, &keystore.Response{
		Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"secret":1}`),
	}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Minute)

	a := f.admin(t, "GET", "/admin/claims?older_than=5m", "")
	claims, _ := a.body["claims"].([]any)
	if a.status != 200 || len(claims) != 1 {
		t.Fatalf("list older_than=5m = %d %s; want the old claim only", a.status, a.raw)
	}
	c := claims[0].(map[string]any)
	if c["key"] != old.String() || c["route"] != "pay" || c["state"] != "in_flight" || c["age_seconds"].(float64) != 660 ||
		c["lease_expired"] != true || c["fingerprint"] == "" {
		t.Errorf("listed claim = %v", c)
	}
	a = f.admin(t, "GET", "/admin/claims", "")
	if claims, _ := a.body["claims"].([]any); len(claims) != 2 || claims[0].(map[string]any)["key"] != old.String() ||
		claims[1].(map[string]any)["key"] != young.String() {
		t.Errorf("list = %s; want both in-flight claims, oldest first", a.raw)
	}
	for _, q := range []string{"older_than=5", "older_than=-1m", "limit=0", "limit=1001", "limit=x"} {
		if a := f.admin(t, "GET", "/admin/claims?"+q, ""); a.status != 400 {
			t.Errorf("list ?%s = %d; want 400", q, a.status)
		}
	}
	if a := f.admin(t, "GET", "/admin/claims?limit=1", ""); a.body["truncated"] != true {
		t.Errorf("list limit=1 = %s; want truncated", a.raw)
	}

	// Inspect: the stored answer's body only when asked for.
	a = f.admin(t, "GET", "/admin/claims/"+done.String(), "")
	resp, _ := a.body["response"].(map[string]any)
	if a.status != 200 || a.body["state"] != "completed" || resp["status"].(float64) != 201 || resp["body_bytes"].(float64) != 12 ||
		strings.Contains(a.raw, "secret") || resp["headers"] != nil || a.body["lease_end"] != nil {
		t.Errorf("inspect = %s; want completed, status 201, no body", a.raw)
	}
	a = f.admin(t, "GET", "/admin/claims/"+strings.ToUpper(done.String())+"?body=true", "")
	resp, _ = a.body["response"].(map[string]any)
	if resp["body"] != `{"secret":1}` || resp["headers"] == nil {
		t.Errorf("inspect body=true = %s; want the body and headers", a.raw)
	}
	a = f.admin(t, "GET", "/admin/claims/"+young.String(), "")
	if a.body["state"] != "in_flight" || a.body["lease_end"] == nil || a.body["lease_expired"] != false {
		t.Errorf("inspect in flight = %s", a.raw)
	}
	if a := f.admin(t, "GET", "/admin/claims/"+keystore.NewKey("none").String(), ""); a.status != 404 {
		t.Errorf("inspect unknown = %d; want 404", a.status)
	}
	if a := f.admin(t, "GET", "/admin/claims/xyz", ""); a.status != 400 || a.body["code"] != "invalid_key" {
		t.Errorf("inspect bad key = %d %s; want 400 invalid_key", a.status, a.raw)
	}
}

func TestReleaseAndComplete(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token)
	ctx := context.Background()
	k, tok := f.claim(t, "stuck", "pay")
	path := "/admin/claims/" + k.String()

	for _, body := range []string{``, `{}`, `{"reason":"  "}`, `{"reason":"x","extra":1}`, `{"reason":"x"} {}`} {
		if a := f.admin(t, "POST", path+"/release", body); a.status != 400 {
			t.Errorf("release with %q = %d %s; want 400", body, a.status, a.raw)
		}
	}
	if a := f.admin(t, "POST", path+"/release", `{}`); a.body["code"] != "reason_required" {
		t.Errorf("release without a reason: code %v; want reason_required", a.body["code"])
	}
	if rec, err := f.store.Get(ctx, k); err != nil || rec.State != keystore.StateInFlight {
		t.Fatalf("after refused releases: %+v, %v; want still in flight", rec, err)
	}
	a := f.admin(t, "POST", path+"/release", `{"reason":"INC-42: the payment provider has no such charge"}`)
	if a.status != 200 || a.body["action"] != "released" || a.body["route"] != "pay" {
		t.Fatalf("release = %d %s", a.status, a.raw)
	}
	if _, err := f.store.Get(ctx, k); err == nil {
		t.Errorf("the record survived its release")
	}
	if err := f.store.Complete(ctx, k, tok, &keystore.Response{Status: 201}); err == nil {
		t.Errorf("the old holder's late completion was accepted")
	}
	if a := f.admin(t, "POST", path+"/release", `{"reason":"again"}`); a.status != 404 {
		t.Errorf("second release = %d; want 404", a.status)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, `"reason":"INC-42: the payment provider has no such charge"`) || !strings.Contains(logs, `"action":"release"`) {
		t.Errorf("the release was not logged with its reason:\n%s", logs)
	}

	k2, _ := f.claim(t, "ran", "pay")
	path2 := "/admin/claims/" + k2.String() + "/complete"
	for _, c := range []struct{ name, body string }{
		{"no reason", `{"status":201}`},
		{"no status", `{"reason":"r"}`},
		{"1xx", `{"reason":"r","status":101}`},
		{"both bodies", `{"reason":"r","status":201,"body":"a","body_base64":"YQ=="}`},
		{"bad base64", `{"reason":"r","status":201,"body_base64":"!!"}`},
		{"over the cap", `{"reason":"r","status":201,"body":"` + strings.Repeat("x", 65) + `"}`},
		{"hop-by-hop", `{"reason":"r","status":201,"headers":{"Connection":["close"]}}`},
		{"bad name", `{"reason":"r","status":201,"headers":{"a b":["c"]}}`},
		{"CRLF", `{"reason":"r","status":201,"headers":{"X":["a\r\nb"]}}`},
	} {
		if a := f.admin(t, "POST", path2, c.body); a.status != 400 {
			t.Errorf("complete %s = %d %s; want 400", c.name, a.status, a.raw)
		}
	}
	a = f.admin(t, "POST", path2, `{"reason":"INC-43: order 7 exists","status":201,"headers":{"content-type":["application/json"]},"body_base64":"eyJvcmRlciI6N30="}`)
	if a.status != 200 || a.body["action"] != "completed" {
		t.Fatalf("complete = %d %s", a.status, a.raw)
	}
	rec, err := f.store.Get(ctx, k2)
	if err != nil || rec.State != keystore.StateCompleted || rec.Response.Status != 201 ||
		!bytes.Equal(rec.Response.Body, []byte(`{"order":7}`)) || rec.Response.Header.Get("Content-Type") != "application/json" {
		t.Errorf("completed record = %+v, %v", rec, err)
	}
	if a := f.admin(t, "POST", path2, `{"reason":"again","status":200}`); a.status != 409 || a.body["code"] != "not_in_flight" {
		t.Errorf("completing a completed record = %d %s; want 409 not_in_flight", a.status, a.raw)
	}
	if !strings.Contains(f.logs.String(), `"reason":"INC-43: order 7 exists"`) {
		t.Errorf("the completion was not logged with its reason")
	}
	if strings.Contains(f.logs.String(), "eyJvcmRlciI6N30") || strings.Contains(f.logs.String(), `{\"order\":7}`) {
		t.Errorf("a body reached the log")
	}
}

// TestCompleteDropsHeaders: an operator's answer obeys the rules of an
// upstream's (issue 13, finding 8): drop_headers and the per-attempt
// Traceresponse and Server-Timing are not stored, a body over the cap is
// refused, and the audit line names the stored and the dropped headers
// (never their values).
func TestCompleteDropsHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token)
	k, _ := f.claim(t, "cookie", "pay")
	path := "/admin/claims/" + k.String() + "/complete"
	if a := f.admin(t, "POST", path, `{"reason":"r","status":201,"body":"`+strings.Repeat("x", 65)+`"}`); a.status != 400 {
		t.Errorf("complete over max_response_bytes = %d %s; want 400", a.status, a.raw)
	}
	a := f.admin(t, "POST", path, `{"reason":"INC-44","status":201,"headers":{"Set-Cookie":["sid=secret-cookie"],"X-Order":["7"],"server-timing":["db;dur=3"],"Traceresponse":["00-1-2-01"],"Content-Type":["application/json"]},"body":"{}"}`)
	if a.status != 200 {
		t.Fatalf("complete = %d %s", a.status, a.raw)
	}
	if got := fmt.Sprint(a.body["headers"], a.body["dropped_headers"]); got != "[Content-Type X-Order] [Server-Timing Set-Cookie Traceresponse]" {
		t.Errorf("answer's headers, dropped = %s; want [Content-Type X-Order] [Server-Timing Set-Cookie Traceresponse]", got)
	}
	rec, err := f.store.Get(context.Background(), k)
	if err != nil || rec.State != keystore.StateCompleted {
		t.Fatalf("record = %+v, %v", rec, err)
	}
	for _, h := range []string{"Set-Cookie", "Server-Timing", "Traceresponse"} {
		if v, ok := rec.Response.Header[h]; ok {
			t.Errorf("stored %s: %q; want it dropped", h, v)
		}
	}
	if rec.Response.Header.Get("X-Order") != "7" || rec.Response.Header.Get("Content-Type") != "application/json" {
		t.Errorf("stored headers = %v; want X-Order and Content-Type kept", rec.Response.Header)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, `"answer_headers":["Content-Type","X-Order"]`) || !strings.Contains(logs, `"dropped_headers":["Server-Timing","Set-Cookie","Traceresponse"]`) {
		t.Errorf("the audit line lacks the header names:\n%s", logs)
	}
	if strings.Contains(logs, "secret-cookie") {
		t.Errorf("a header value reached the log")
	}
}

func TestComputeKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token)
	want := keystore.NewKey("shop-1", "Bearer abc", "", "order-7").String()
	a := f.admin(t, "POST", "/admin/keys", `{"tenant":"shop-1","identity":{"authorization":["Bearer abc"]},"idempotency_key":"order-7"}`)
	if a.status != 200 || a.body["key"] != want {
		t.Errorf("keys = %d %s; want key %s", a.status, a.raw, want)
	}
	a = f.admin(t, "POST", "/admin/keys", `{"host":"shop.example","idempotency_key":"k"}`)
	if a.body["key"] != keystore.NewKey("tenant-of-shop.example", "", "", "k").String() || a.body["tenant"] != "tenant-of-shop.example" {
		t.Errorf("keys by host = %s", a.raw)
	}
	// Cookies become one Cookie header, in name order, as a browser
	// would send them.
	a = f.admin(t, "POST", "/admin/keys", `{"tenant":"","cookies":{"sid":"alice","lang":"en"},"idempotency_key":"k"}`)
	if a.status != 200 || a.body["key"] != keystore.NewKey("", "", "lang=en; sid=alice", "k").String() {
		t.Errorf("keys by cookies = %d %s", a.status, a.raw)
	}
	// A value net/http's parser drops is sent as the client sent it: the
	// identity reads cookies byte for byte.
	a = f.admin(t, "POST", "/admin/keys", `{"tenant":"","cookies":{"sid":"{\"u\":1}"},"idempotency_key":"k"}`)
	if a.status != 200 || a.body["key"] != keystore.NewKey("", "", `sid={"u":1}`, "k").String() {
		t.Errorf("keys by a JSON cookie = %d %s", a.status, a.raw)
	}
	for _, body := range []string{`{}`, `{"tenant":"a","host":"b","idempotency_key":"k"}`, `{"cookies":{"sid":"x "},"idempotency_key":"k"}`,
		`{"cookies":{"s id":"x"},"idempotency_key":"k"}`, `{"cookies":{"sid":"a;b"},"idempotency_key":"k"}`,
		`{"claims":{"sub":"alice"},"idempotency_key":"k"}`, `{"host":"unknown.example","idempotency_key":"k"}`} {
		if a := f.admin(t, "POST", "/admin/keys", body); a.status != 400 {
			t.Errorf("keys %s = %d; want 400", body, a.status)
		}
	}
	if strings.Contains(f.logs.String(), "Bearer abc") || strings.Contains(f.logs.String(), "order-7") || strings.Contains(f.logs.String(), "alice") {
		t.Errorf("an identity value or a client key reached the log")
	}
}

func mustCounter(t *testing.T, g prometheus.Gatherer, name string, labels ...string) prometheus.Collector {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "x"})
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			ok := true
			for i, lp := range m.GetLabel() {
				if i < len(labels) && lp.GetValue() != labels[i] {
					ok = false
				}
			}
			if ok {
				c.Add(m.GetCounter().GetValue())
			}
		}
	}
	return c
}

// TestProblemRequestID: the admin API's problems carry the request's ID,
// the client's when it sent a sane one, as the proxy's problems do.
func TestProblemRequestID(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token)
	for _, sent := range []string{"", "ops-42", "bad id"} {
		req, err := http.NewRequest("GET", f.srv.URL+"/admin/claims", nil)
		if err != nil {
			t.Fatal(err)
		}
		if sent != "" {
			req.Header.Set("X-Request-Id", sent)
		}
		res, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Code      string `json:"code"`
			RequestID string `json:"request_id"`
		}
		err = json.NewDecoder(res.Body).Decode(&body)
		res.Body.Close()
		id := res.Header.Get("X-Request-Id")
		switch {
		case err != nil || res.StatusCode != 401 || body.Code != "unauthorized":
			t.Errorf("sent %q: %d %q, %v; want 401 unauthorized", sent, res.StatusCode, body.Code, err)
		case body.RequestID == "" || body.RequestID != id:
			t.Errorf("sent %q: request_id %q, X-Request-Id %q; want the same, not empty", sent, body.RequestID, id)
		case sent == "ops-42" && id != sent:
			t.Errorf("sent %q: X-Request-Id %q; want the client's", sent, id)
		case sent == "bad id" && id == sent:
			t.Errorf("sent %q: the unsafe ID was kept", sent)
		}
	}
}

// An operator's answer loses what the record's route drops: the route's own
// drop_headers replace the global ones, as for an upstream's answer.
func TestCompleteDropsTheRoutesHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token)
	for _, c := range []struct {
		route       string
		kept, dropd string
	}{
		{"pay", "[Content-Type X-Order]", "[Server-Timing Set-Cookie]"},         // no drop_headers of its own: the global ones
		{"drops_order", "[Content-Type Set-Cookie]", "[Server-Timing X-Order]"}, // its own replace the global ones
		{"drops_none", "[Content-Type Set-Cookie X-Order]", "[Server-Timing]"},  // its own: none (per-attempt headers still go)
		{"", "[Content-Type X-Order]", "[Server-Timing Set-Cookie]"},            // no route recorded
	} {
		t.Run("route="+c.route, func(t *testing.T) {
			k, _ := f.claim(t, "cookie-"+c.route, c.route)
			a := f.admin(t, "POST", "/admin/claims/"+k.String()+"/complete",
				`{"reason":"INC-45","status":201,"headers":{"Set-Cookie":["sid=1"],"X-Order":["7"],"Server-Timing":["db;dur=3"],"Content-Type":["application/json"]},"body":"{}"}`)
			if a.status != 200 {
				t.Fatalf("complete = %d %s", a.status, a.raw)
			}
			if got := fmt.Sprint(a.body["headers"], " ", a.body["dropped_headers"]); got != c.kept+" "+c.dropd {
				t.Errorf("kept, dropped = %s; want %s %s", got, c.kept, c.dropd)
			}
			rec, err := f.store.Get(context.Background(), k)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(slices.Sorted(maps.Keys(rec.Response.Header))); got != c.kept {
				t.Errorf("stored headers %s; want %s", got, c.kept)
			}
		})
	}
}

// TestCompleteRefusesUnreplayable: an operator's answer must be one a
// replay can give (issue 28, item 8): a final status from 200 to 599, not
// 304, no body on 204 or 205, header values a server can send. Refused ones
// get 400 invalid_request and leave the claim in flight; the others
// complete it.
func TestCompleteRefusesUnreplayable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token)
	ctx := context.Background()
	for i, c := range []struct {
		name, answer string // answer: the body's fields after the reason
		ok           bool
		why          string // in the refusal's detail
	}{
		{"100 Continue", `"status":100`, false, "interim"},
		{"101 Switching Protocols", `"status":101`, false, "interim"},
		{"103 Early Hints", `"status":103`, false, "interim"},
		{"199", `"status":199`, false, "interim"},
		{"0", `"status":0`, false, "not an HTTP status"},
		{"negative", `"status":-200`, false, "not an HTTP status"},
		{"600", `"status":600`, false, "not an HTTP status"},
		{"999", `"status":999`, false, "not an HTTP status"},
		{"304", `"status":304`, false, "conditional"},
		{"304 with a body", `"status":304,"body":"x"`, false, "conditional"},
		{"304 with headers", `"status":304,"headers":{"ETag":["\"v1\""]}`, false, "conditional"},
		{"204 with a body", `"status":204,"body":"x"`, false, "no body"},
		{"204 with a base64 body", `"status":204,"body_base64":"eA=="`, false, "no body"},
		{"205 with a body", `"status":205,"body":"x"`, false, "no body"},
		{"a value with a control character", `"status":201,"headers":{"X-A":["a\u0001b"]}`, false, "control character"},
		{"a value with DEL", `"status":201,"headers":{"X-A":["a\u007fb"]}`, false, "control character"},
		{"a value with NUL", `"status":201,"headers":{"X-A":["a\u0000b"]}`, false, "control character"},
		{"a value with LF", `"status":201,"headers":{"X-A":["a\nb"]}`, false, "control character"},
		{"204 without a body", `"status":204`, true, ""},
		{"204 with an empty body", `"status":204,"body":""`, true, ""},
		{"205 without a body", `"status":205`, true, ""},
		{"200", `"status":200,"body":"ok"`, true, ""},
		{"599", `"status":599`, true, ""},
		{"a value with a tab and obs-text", `"status":201,"headers":{"X-A":["a\tb é"]}`, true, ""},
	} {
		k, _ := f.claim(t, fmt.Sprint("unreplayable-", i), "pay")
		a := f.admin(t, "POST", "/admin/claims/"+k.String()+"/complete", `{"reason":"INC-7",`+c.answer+`}`)
		rec, err := f.store.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if c.ok {
			if a.status != 200 || rec.State != keystore.StateCompleted {
				t.Errorf("%s: complete = %d %s, record %s; want 200, completed", c.name, a.status, a.raw, rec.State)
			}
			continue
		}
		detail, _ := a.body["detail"].(string)
		if a.status != 400 || a.body["code"] != "invalid_request" || !strings.Contains(detail, c.why) || rec.State != keystore.StateInFlight {
			t.Errorf("%s: complete = %d %s, record %s; want 400 invalid_request saying %q, still in flight", c.name, a.status, a.raw, rec.State, c.why)
		}
	}
}

// damagingStore is the memory store whose listings also report damaged
// records, as a Redis store or a sealed store does for values it cannot
// read: the memory store's entries are typed values and cannot be damaged.
type damagingStore struct {
	*memstore.Store
	damaged int
	fail    error // when set, InFlight fails with it
}

func (s *damagingStore) InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]keystore.Record, error) {
	if s.fail != nil {
		return nil, s.fail
	}
	recs, err := s.Store.InFlight(ctx, olderThan, limit)
	if err != nil {
		return nil, err
	}
	d := &keystore.DamagedError{}
	for i := range s.damaged {
		d.Add(fmt.Sprintf("idemgate:{%064x}", i), errors.New("corrupt or foreign value at record key"))
	}
	return recs, d.OrNil()
}

// TestListSkipsDamaged: a listing answers 200 with the records it could
// read when some could not be (issue 28, item 8), says how many it skipped,
// counts them in idemgate_admin_damaged_records_total and logs their names;
// a store that fails outright is still 503.
func TestListSkipsDamaged(t *testing.T) {
	t.Parallel()
	st := &damagingStore{Store: memstore.New(memstore.Options{})}
	t.Cleanup(func() { st.Close() })
	reg := prometheus.NewPedanticRegistry()
	logs := &itestutil.SyncBuffer{}
	h, err := New(Options{Store: st, Token: token, Registerer: reg, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f := &fixture{srv: srv}
	good := keystore.NewKey("good")
	if _, err := st.Reserve(context.Background(), good, keystore.ReserveOptions{Route: "pay", Lease: time.Minute, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range []int{0, 1, 12} {
		st.damaged = n
		total += n
		a := f.admin(t, "GET", "/admin/claims", "")
		claims, _ := a.body["claims"].([]any)
		if a.status != 200 || len(claims) != 1 || claims[0].(map[string]any)["key"] != good.String() || a.body["damaged"] != float64(n) {
			t.Errorf("%d damaged: list = %d %s; want 200 with the good claim and damaged %d", n, a.status, a.raw, n)
		}
		if got := testutil.ToFloat64(mustCounter(t, reg, "idemgate_admin_damaged_records_total")); got != float64(total) {
			t.Errorf("%d damaged: idemgate_admin_damaged_records_total = %v; want %d", n, got, total)
		}
	}
	if !strings.Contains(logs.String(), `"msg":"admin listing skipped damaged records"`) || !strings.Contains(logs.String(), `"damaged":12`) ||
		!strings.Contains(logs.String(), fmt.Sprintf("idemgate:{%064x}", 9)) || strings.Contains(logs.String(), fmt.Sprintf("idemgate:{%064x}", 10)) {
		t.Errorf("log = %s; want the skipped records logged, their count and the first %d names", logs.String(), keystore.MaxDamagedNames)
	}
	st.fail = errors.New("connection refused")
	if a := f.admin(t, "GET", "/admin/claims", ""); a.status != 503 || a.body["code"] != "store_unavailable" {
		t.Errorf("list on a failing store = %d %s; want 503 store_unavailable", a.status, a.raw)
	}
}

// unknownRecord makes an unknown record of route (cause broken) with the
// sent mark's info, and returns its key and claim id.
func (f *fixture) unknownRecord(t *testing.T, name, route string) (keystore.Key, keystore.ClaimID) {
	t.Helper()
	ctx := context.Background()
	k := keystore.NewKey(name)
	res, err := f.store.Reserve(ctx, k, keystore.ReserveOptions{
		Fingerprint: keystore.Fingerprint{1, 2, 3}, Route: route, Lease: 2 * time.Minute, Retention: time.Hour, Hold: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.store.MarkSent(ctx, k, res.Token, keystore.UnknownInfo("POST", "/pay?ref=9", "client-key-9", "req-9")); err != nil {
		t.Fatal(err)
	}
	if err := f.store.MarkUnknown(ctx, k, res.Token, keystore.CauseBroken); err != nil {
		t.Fatal(err)
	}
	return k, res.Claim.ID
}

// TestUnknownRecords: the admin API lists unknown records with their
// cause and the original request, and resolves them with a reason: the
// first resolution wins, fenced by the claim id; complete makes retries
// replay, release lets the next retry claim anew.
func TestUnknownRecords(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token)
	ctx := context.Background()
	k, id := f.unknownRecord(t, "held", "pay")
	f.claim(t, "running", "pay") // in flight: not listed
	a := f.admin(t, "GET", "/admin/unknown", "")
	list, _ := a.body["unknown"].([]any)
	if a.status != 200 || len(list) != 1 {
		t.Fatalf("list unknown = %d %s; want one record", a.status, a.raw)
	}
	got := list[0].(map[string]any)
	orig, _ := got["original"].(map[string]any)
	if got["key"] != k.String() || got["state"] != "outcome_unknown" || got["cause"] != "broken" || got["claim_id"] != id.String() ||
		orig["path"] != "/pay?ref=9" || orig["request_id"] != "req-9" || orig["method"] != "POST" || orig["idempotency_key"] != "client-key-9" {
		t.Errorf("listed record = %v", got)
	}
	path := "/admin/claims/" + k.String() + "/complete"
	if a := f.admin(t, "POST", path, `{"reason":"r","status":201,"claim_id":"`+keystore.NewClaimID().String()+`"}`); a.status != 409 {
		t.Errorf("complete fenced by another claim id = %d %s; want 409", a.status, a.raw)
	}
	a = f.admin(t, "POST", path, `{"reason":"INC-7: charge 9 exists","status":201,"body":"{\"charge\":9}","claim_id":"`+id.String()+`"}`)
	if a.status != 200 || a.body["action"] != "completed" {
		t.Fatalf("complete = %d %s", a.status, a.raw)
	}
	res, err := f.store.Reserve(ctx, k, keystore.ReserveOptions{Fingerprint: keystore.Fingerprint{1, 2, 3}, Route: "pay", Lease: time.Minute, Retention: time.Hour, Hold: true})
	if err != nil || res.Response == nil || string(res.Response.Body) != `{"charge":9}` {
		t.Errorf("Reserve after complete = %+v, %v; want the operator's answer replayed", res, err)
	}
	if a := f.admin(t, "POST", "/admin/claims/"+k.String()+"/release", `{"reason":"second","claim_id":"`+id.String()+`"}`); a.status != 409 {
		t.Errorf("a second resolution = %d %s; want 409 (the first wins)", a.status, a.raw)
	}

	k2, _ := f.unknownRecord(t, "held2", "pay")
	if a := f.admin(t, "POST", "/admin/claims/"+k2.String()+"/release", `{"reason":"INC-8: no such charge"}`); a.status != 200 || a.body["action"] != "released" {
		t.Fatalf("release = %d %s", a.status, a.raw)
	}
	res, err = f.store.Reserve(ctx, k2, keystore.ReserveOptions{Fingerprint: keystore.Fingerprint{1, 2, 3}, Route: "pay", Lease: time.Minute, Retention: time.Hour, Hold: true})
	if err != nil || res.Token == 0 {
		t.Errorf("Reserve after release = %+v, %v; want a new claim", res, err)
	}
	if a := f.admin(t, "GET", "/admin/unknown", ""); a.status != 200 || len(a.body["unknown"].([]any)) != 0 {
		t.Errorf("list after the resolutions = %d %s; want none", a.status, a.raw)
	}
	if logs := f.logs.String(); !strings.Contains(logs, `"reason":"INC-7: charge 9 exists"`) || !strings.Contains(logs, `"reason":"INC-8: no such charge"`) {
		t.Errorf("the resolutions were not logged with their reasons:\n%s", logs)
	}
}

// TestRequestIDHeader: with request_id_header set, the admin API reads,
// answers and reports the request ID in that header.
func TestRequestIDHeader(t *testing.T) {
	t.Parallel()
	h, err := New(Options{Store: memstore.New(memstore.Options{}), RequestIDHeader: func() string { return "Request-Id" }})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, _ := http.NewRequest("GET", srv.URL+"/admin/claims", nil)
	req.Header.Set("Request-Id", "req_ops")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		RequestID string `json:"request_id"`
	}
	err = json.NewDecoder(res.Body).Decode(&body)
	res.Body.Close()
	if err != nil || res.Header.Get("Request-Id") != "req_ops" || body.RequestID != "req_ops" || res.Header.Get("X-Request-Id") != "" {
		t.Errorf("answer: Request-Id %q, request_id %q, X-Request-Id %q, %v; want req_ops, req_ops, none", res.Header.Get("Request-Id"), body.RequestID, res.Header.Get("X-Request-Id"), err)
	}
}

// TestCompleteInFlightFencedByClaimID: complete on a claim in flight with
// the claim_id the operator saw (the console sends it) repairs it; with
// another claim's id it is refused with 409 and the claim stays in flight.
func TestCompleteInFlightFencedByClaimID(t *testing.T) {
	t.Parallel()
	f := newFixture(t, token)
	ctx := context.Background()
	k, _ := f.claim(t, "fenced-in-flight", "pay")
	path := "/admin/claims/" + k.String() + "/complete"
	if a := f.admin(t, "POST", path, `{"reason":"r","status":201,"claim_id":"`+keystore.NewClaimID().String()+`"}`); a.status != 409 {
		t.Errorf("complete with another claim id = %d %s; want 409", a.status, a.raw)
	}
	rec, err := f.store.Get(ctx, k)
	if err != nil || rec.State != keystore.StateInFlight {
		t.Fatalf("after a refused complete: %+v, %v; want in flight", rec, err)
	}
	if a := f.admin(t, "POST", path, `{"reason":"r","status":201,"claim_id":"`+rec.ClaimID.String()+`"}`); a.status != 200 {
		t.Errorf("complete with the claim's own id = %d %s; want 200", a.status, a.raw)
	}
	if rec, err := f.store.Get(ctx, k); err != nil || rec.State != keystore.StateCompleted {
		t.Errorf("after complete: %+v, %v; want completed", rec, err)
	}
}

// TestLimitClients: GET /admin/limits/clients lists what Options.Clients
// returns, behind the token; without a source it is 404 not_supported, and
// the addresses never reach the log.
func TestLimitClients(t *testing.T) {
	t.Parallel()
	busy := []LimiterClients{
		{Limiter: "edge", Clients: []Client{{Client: "192.0.2.7/32", Requests: 640, MaxOvercount: 32, Refused: 12}}},
		{Limiter: "route", Route: "create_order", Clients: []Client{}},
	}
	tests := []struct {
		name       string
		clients    func() []LimiterClients
		auth       string
		wantStatus int
		want       string // the body's limiters as JSON (keys sorted), or the problem's code
	}{
		{"listed", func() []LimiterClients { return busy }, "Bearer " + token, 200,
			`[{"clients":[{"client":"192.0.2.7/32","max_overcount":32,"refused":12,"requests":640}],"limiter":"edge","route":""},{"clients":[],"limiter":"route","route":"create_order"}]`},
		{"none running", func() []LimiterClients { return nil }, "Bearer " + token, 200, `[]`},
		{"no token", func() []LimiterClients { return busy }, "", 401, "unauthorized"},
		{"not counted", nil, "Bearer " + token, 404, "not_supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, token, func(o *Options) { o.Clients = tt.clients })
			var auth []string
			if tt.auth != "" {
				auth = []string{tt.auth}
			}
			a := f.call(t, "GET", "/admin/limits/clients", "", auth...)
			if a.status != tt.wantStatus {
				t.Fatalf("status = %d (%s); want %d", a.status, a.raw, tt.wantStatus)
			}
			if a.status != 200 {
				if a.body["code"] != tt.want {
					t.Errorf("code = %v; want %s", a.body["code"], tt.want)
				}
				return
			}
			got, _ := json.Marshal(a.body["limiters"])
			if string(got) != tt.want {
				t.Errorf("limiters = %s; want %s", got, tt.want)
			}
			if strings.Contains(f.logs.String(), "192.0.2.7") {
				t.Errorf("a client address reached the log: %s", f.logs.String())
			}
			if n := testutil.ToFloat64(mustCounter(t, f.reg, "idemgate_admin_requests_total", "limit_clients", "200")); n != 1 {
				t.Errorf("limit_clients 200 counted %v times; want 1", n)
			}
		})
	}
}
