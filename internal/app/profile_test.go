package app

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testutil"
)

func profileApp(t *testing.T, yaml string) string {
	t.Helper()
	a, err := New(e2eConfig(t, yaml), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return serveTestApp(t, a)
}

// stripeError is Stripe's error object.
type stripeError struct {
	Error struct {
		Type, Code, Message string
		RequestID           string `json:"request_id"`
	}
}

func stripeErr(t *testing.T, a httpAnswer) stripeError {
	t.Helper()
	var e stripeError
	if err := json.Unmarshal([]byte(a.body), &e); err != nil || a.header.Get("Content-Type") != "application/json" {
		t.Fatalf("answer %v (%s) is not Stripe's error object: %v", a, a.header.Get("Content-Type"), err)
	}
	if e.Error.RequestID == "" || e.Error.RequestID != a.header.Get("Request-Id") {
		t.Errorf("request_id %q, Request-Id %q; want the same, not empty", e.Error.RequestID, a.header.Get("Request-Id"))
	}
	return e
}

// TestProfileStripe: profile stripe as Stripe's SDKs meet it (DESIGN.md,
// Profiles): form bodies by parameters, printable keys, the Stripe-Account
// in the scope, Request-Id, Stripe's error object with
// Stripe-Should-Retry, and a duplicate that waits for its original.
func TestProfileStripe(t *testing.T) {
	up := newCountingUpstream(t)
	base := profileApp(t, `
profile: stripe
upstream: {url: "`+up.URL+`", timeout: 2s}
edge_limit: {rate: 0}
idempotency: {wait_timeout: 300ms}
routes:
  - {name: charges, method: POST, path: /v1/charges, idempotent: true}
`)
	charge := func(key, account, body string, hdr ...string) httpAnswer {
		h := append([]string{"Idempotency-Key", key, "Authorization", "Bearer sk_test_1", "Stripe-Account", account,
			"Content-Type", "application/x-www-form-urlencoded"}, hdr...)
		return doHTTP(t, http.DefaultClient, "POST", base+"/v1/charges", body, h...)
	}
	first := charge("order 1001", "acct_A", "amount=100&currency=usd&metadata[order]=1001", "Request-Id", "req_1")
	if first.status != 201 || first.header.Get("Request-Id") != "req_1" {
		t.Fatalf("first = %v %v; want 201 with Request-Id req_1", first, first.header)
	}
	retry := charge("order 1001", "acct_A", "metadata%5Border%5D=1001&currency=usd&amount=100")
	if retry.status != 201 || retry.body != first.body || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("SDK retry with its form reordered = %v %v; want the first answer replayed", retry, retry.header)
	}
	// One key, two connected accounts: two writes.
	if other := charge("order 1001", "acct_B", "amount=100&currency=usd&metadata[order]=1001"); other.status != 201 || other.body == first.body {
		t.Errorf("the same key for another connected account = %v; want its own write", other)
	}
	if n := up.count("/v1/charges", "order 1001"); n != 2 {
		t.Errorf("the upstream ran %d charges; want 2 (one per account)", n)
	}

	reused := charge("order 1001", "acct_A", "amount=200&currency=usd")
	if e := stripeErr(t, reused); reused.status != 409 || e.Error.Type != "idempotency_error" || e.Error.Code != "idempotency_key_reused" ||
		reused.header.Get("Stripe-Should-Retry") != "false" {
		t.Errorf("reused key = %v, Stripe-Should-Retry %q; want 409 idempotency_error, false", reused, reused.header.Get("Stripe-Should-Retry"))
	}
	bad := charge("caf\u00e9", "acct_A", "amount=1")
	if e := stripeErr(t, bad); bad.status != 400 || e.Error.Type != "invalid_request_error" || e.Error.Code != "idempotency_key_invalid" ||
		bad.header.Get("Stripe-Should-Retry") != "" {
		t.Errorf("invalid key = %v; want 400 invalid_request_error, no Stripe-Should-Retry", bad)
	}

	// A duplicate of a running charge waits (in_progress: wait); past its
	// wait it gets Stripe's idempotency_key_in_use, to be retried.
	done := make(chan httpAnswer, 1)
	go func() { done <- charge("slow", "acct_A", "amount=1", "X-Hang", "1") }()
	testutil.Eventually(t, 5*time.Second, "the original to reach the upstream", func() bool { return up.count("/v1/charges", "slow") > 0 })
	start := time.Now()
	dup := charge("slow", "acct_A", "amount=1")
	if e := stripeErr(t, dup); dup.status != 409 || e.Error.Type != "idempotency_error" || e.Error.Code != "idempotency_key_in_use" ||
		dup.header.Get("Stripe-Should-Retry") != "true" || dup.header.Get("Retry-After") != "2" || time.Since(start) < 300*time.Millisecond {
		t.Errorf("duplicate of a running charge = %v %v after %v; want 409 idempotency_key_in_use after its wait, Stripe-Should-Retry true", dup, dup.header, time.Since(start))
	}
	<-done
}

// TestProfileIETF: profile ietf is draft-ietf-httpapi-idempotency-key-header-07
// as written, one test per requirement, citing its section.
func TestProfileIETF(t *testing.T) {
	up := newCountingUpstream(t)
	base := profileApp(t, `
profile: ietf
upstream: {url: "`+up.URL+`", timeout: 2s}
edge_limit: {rate: 0}
routes:
  - {name: orders, method: POST, path: /orders, idempotent: true, require_key: true}
`)
	post := func(key, body string, hdr ...string) httpAnswer {
		h := append([]string{"Authorization", "Bearer a", "Content-Type", "application/json"}, hdr...)
		if key != "" {
			h = append(h, "Idempotency-Key", key)
		}
		return doHTTP(t, http.DefaultClient, "POST", base+"/orders", body, h...)
	}
	problem := func(a httpAnswer) (title string) {
		t.Helper()
		var p struct {
			Type, Title string
			Status      int
		}
		if err := json.Unmarshal([]byte(a.body), &p); err != nil || a.header.Get("Content-Type") != "application/problem+json" || p.Status != a.status || p.Type == "" {
			t.Fatalf("%v (%s): not a problem document: %v", a, a.header.Get("Content-Type"), err)
		}
		return p.Title
	}

	// §2.1: the header's value is a Structured Field sf-string; its value is the key.
	first := post(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{"sku":"tea"}`)
	if first.status != 201 {
		t.Fatalf("first = %v", first)
	}
	if r := post(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{ "sku": "tea" }`); r.status != 201 || r.body != first.body {
		t.Errorf("§2.6 a retry with the same key and payload = %v; want the first result", r)
	}
	if r := post(`8e03978e-40d5-43e8-bc93-6894a57f9324`, `{"sku":"tea"}`); r.status != 400 || problem(r) == "" {
		t.Errorf("§2.1 a key that is not an sf-string = %v; want 400", r)
	}
	// §2.7: a missing key on an operation that requires one → 400.
	if r := post("", `{"sku":"tea"}`); r.status != 400 || problem(r) != "Idempotency-Key is missing" {
		t.Errorf("§2.7 missing key = %v; want 400 Idempotency-Key is missing", r)
	}
	// §2.7: a key reused with another payload → 422.
	if r := post(`"8e03978e-40d5-43e8-bc93-6894a57f9324"`, `{"sku":"coffee"}`); r.status != 422 || problem(r) != "Idempotency-Key is already used" {
		t.Errorf("§2.7 reused key = %v; want 422 Idempotency-Key is already used", r)
	}
	// §2.7: a request while the original is still outstanding → 409.
	done := make(chan httpAnswer, 1)
	go func() { done <- post(`"slow"`, `{}`, "X-Hang", "1") }()
	testutil.Eventually(t, 5*time.Second, "the original to reach the upstream", func() bool { return up.count("/orders", `"slow"`) > 0 })
	if r := post(`"slow"`, `{}`); r.status != 409 || problem(r) != "A request is outstanding for this Idempotency-Key" {
		t.Errorf("§2.7 concurrent request = %v; want 409 A request is outstanding for this Idempotency-Key", r)
	}
	<-done
	if n := up.count("/orders", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`); n != 1 {
		t.Errorf("the upstream ran %d orders; want 1", n)
	}
}
