package app

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
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
	// The bare form the conformance vectors send is the same key.
	if r := post(`8e03978e-40d5-43e8-bc93-6894a57f9324`, `{"sku":"tea"}`); r.status != 201 || r.body != first.body || r.header.Get("Idempotency-Replayed") != "true" {
		t.Errorf("§2.1 the bare key of the same string = %v %v; want the first result replayed", r, r.header)
	}
	if r := post(`"8e03978e-40d5-43e8-bc93-6894a57f9324`, `{"sku":"tea"}`); r.status != 400 || problem(r) == "" {
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

// TestProfileIETFRequirements: the rest of the draft's requirements under
// profile ietf, one subtest each, named by its section (TestProfileIETF
// has §2.1's syntax, §2.6's retry and §2.7's three errors; §2.3's expiry
// is TestRoutePolicyRetentionOverridesGlobal, on an injected clock, and
// the vectors' core/expiry-executes-again).
func TestProfileIETFRequirements(t *testing.T) {
	var mu sync.Mutex
	runs := map[string]int{}
	hold := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		id := r.Method + " " + r.URL.Path + " " + r.Header.Get("Idempotency-Key") + " " + r.Header.Get("Authorization")
		mu.Lock()
		runs[id]++
		n := runs[id]
		mu.Unlock()
		if r.URL.Path == "/orders/held" {
			<-hold
		}
		status := http.StatusCreated
		if code, ok := strings.CutPrefix(r.URL.Path, "/refunds/"); ok {
			status, _ = strconv.Atoi(code)
		} else if r.Method == "GET" {
			status = http.StatusOK
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"run":%d,"body":%q}`, n, body)
	}))
	t.Cleanup(up.Close)
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // before the server closes
	base := profileApp(t, `
profile: ietf
upstream: {url: "`+up.URL+`", timeout: 5s}
edge_limit: {rate: 0}
routes:
  - {name: orders, method: POST, path: "/orders/{name}", idempotent: true, require_key: true}
  - {name: refunds, method: POST, path: "/refunds/{status}", idempotent: true}
  - {name: order, method: GET, path: "/orders/{name}"}
`)
	ran := func(method, path, key, auth string) int {
		mu.Lock()
		defer mu.Unlock()
		return runs[method+" "+path+" "+key+" "+auth]
	}
	send := func(method, path, body string, hdr ...string) httpAnswer {
		t.Helper()
		return doHTTP(t, http.DefaultClient, method, base+path, body, append([]string{"Authorization", "Bearer a"}, hdr...)...)
	}
	code := func(a httpAnswer) string {
		t.Helper()
		var p struct{ Code string }
		if err := json.Unmarshal([]byte(a.body), &p); err != nil || a.header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%v (%s): not a problem document", a, a.header.Get("Content-Type"))
		}
		return p.Code
	}
	replayed := func(a httpAnswer) bool { return a.header.Get("Idempotency-Replayed") == "true" }

	t.Run("§1 a key on a GET is not enforced", func(t *testing.T) {
		for i := range 2 {
			if r := send("GET", "/orders/1", "", "Idempotency-Key", `"get-1"`); r.status != 200 || replayed(r) {
				t.Errorf("GET %d = %v; want it forwarded", i+1, r)
			}
		}
		if n := ran("GET", "/orders/1", `"get-1"`, "Bearer a"); n != 2 {
			t.Errorf("the upstream ran %d GETs; want 2", n)
		}
	})
	t.Run("§2 the field name is case-insensitive", func(t *testing.T) {
		first := send("POST", "/orders/case", `{}`, "Idempotency-Key", `"case-1"`)
		retry := send("POST", "/orders/case", `{}`, "idempotency-key", `"case-1"`)
		if first.status != 201 || retry.status != 201 || retry.body != first.body || !replayed(retry) {
			t.Errorf("first %v, retry spelled idempotency-key %v; want the first replayed", first, retry)
		}
	})
	t.Run("§2.2 one payload under two keys is two operations", func(t *testing.T) {
		a := send("POST", "/orders/two", `{"sku":"tea"}`, "Idempotency-Key", `"two-1"`)
		b := send("POST", "/orders/two", `{"sku":"tea"}`, "Idempotency-Key", `"two-2"`)
		if a.status != 201 || b.status != 201 || replayed(b) || ran("POST", "/orders/two", `"two-1"`, "Bearer a")+ran("POST", "/orders/two", `"two-2"`, "Bearer a") != 2 {
			t.Errorf("two keys = %v, %v; want two runs", a, b)
		}
	})
	t.Run("§2.6 a retry gets the completed operation's result, an error too", func(t *testing.T) {
		for _, status := range []int{404, 422, 500} {
			path, key := fmt.Sprint("/refunds/", status), fmt.Sprintf(`"err-%d"`, status)
			first := send("POST", path, `{}`, "Idempotency-Key", key)
			retry := send("POST", path, `{}`, "Idempotency-Key", key)
			if first.status != status || retry.status != status || retry.body != first.body || !replayed(retry) || ran("POST", path, key, "Bearer a") != 1 {
				t.Errorf("%d: first %v, retry %v; want the %d replayed, one run", status, first, retry, status)
			}
		}
	})
	t.Run("§2.6 an answer that says send again releases the key", func(t *testing.T) {
		for _, status := range []int{307, 308, 408, 425, 429, 503} {
			path, key := fmt.Sprint("/refunds/", status), fmt.Sprintf(`"again-%d"`, status)
			c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			for i := range 2 {
				r := doHTTP(t, c, "POST", base+path, `{}`, "Authorization", "Bearer a", "Idempotency-Key", key)
				if r.status != status || replayed(r) {
					t.Errorf("%d: send %d = %v; want the upstream's answer", status, i+1, r)
				}
			}
			if n := ran("POST", path, key, "Bearer a"); n != 2 {
				t.Errorf("%d: the upstream ran %d times; want 2", status, n)
			}
		}
	})
	t.Run("§2.7 a request not corrected keeps failing; the original still replays", func(t *testing.T) {
		first := send("POST", "/orders/fix", `{"sku":"tea"}`, "Idempotency-Key", `"fix-1"`)
		for i := range 2 {
			if r := send("POST", "/orders/fix", `{"sku":"coffee"}`, "Idempotency-Key", `"fix-1"`); r.status != 422 || code(r) != "fingerprint-mismatch" {
				t.Errorf("reuse %d = %v; want 422 fingerprint-mismatch", i+1, r)
			}
		}
		if r := send("POST", "/orders/fix", `{"sku":"tea"}`, "Idempotency-Key", `"fix-1"`); r.body != first.body || !replayed(r) {
			t.Errorf("the corrected retry = %v; want the first %v replayed", r, first)
		}
		if n := ran("POST", "/orders/fix", `"fix-1"`, "Bearer a"); n != 1 {
			t.Errorf("the upstream ran %d times; want 1", n)
		}
	})
	t.Run("§2.7 after a 409 the same request needs no correction", func(t *testing.T) {
		done := make(chan httpAnswer, 1)
		go func() { done <- send("POST", "/orders/held", `{}`, "Idempotency-Key", `"held-1"`) }()
		for deadline := time.Now().Add(5 * time.Second); ran("POST", "/orders/held", `"held-1"`, "Bearer a") == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the original never reached the upstream")
			}
		}
		if r := send("POST", "/orders/held", `{}`, "Idempotency-Key", `"held-1"`); r.status != 409 || code(r) != "conflict" || r.header.Get("Retry-After") == "" {
			t.Errorf("while outstanding = %v; want 409 conflict with Retry-After", r)
		}
		release()
		first := <-done
		if r := send("POST", "/orders/held", `{}`, "Idempotency-Key", `"held-1"`); r.status != 201 || r.body != first.body || !replayed(r) {
			t.Errorf("the same request after the original = %v; want %v replayed", r, first)
		}
	})
	t.Run("§5 the key is validated before anything is processed", func(t *testing.T) {
		for _, hdr := range [][]string{
			{"Idempotency-Key", `""`},
			{"Idempotency-Key", `"` + strings.Repeat("k", 256) + `"`},
			{"Idempotency-Key", strings.Repeat("k", 256)},
			{"Idempotency-Key", `"open`},
			{"Idempotency-Key", `"a"`, "Idempotency-Key", `"b"`},
		} {
			if r := send("POST", "/orders/bad", `{}`, hdr...); r.status != 400 || code(r) != "invalid-key" {
				t.Errorf("%q = %v; want 400 invalid-key", hdr, r)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for id := range runs {
			if strings.HasPrefix(id, "POST /orders/bad ") {
				t.Errorf("%s reached the upstream", id)
			}
		}
	})
	t.Run("§5 the lookup key is the key with the client's identity", func(t *testing.T) {
		as := func(auth string) httpAnswer {
			return doHTTP(t, http.DefaultClient, "POST", base+"/orders/mine", `{}`, "Authorization", auth, "Idempotency-Key", `"guessable-1"`)
		}
		a, b := as("Bearer alice"), as("Bearer bob")
		if a.status != 201 || b.status != 201 || replayed(b) {
			t.Errorf("one key for two clients = %v, %v; want two operations", a, b)
		}
		if r := as("Bearer bob"); r.body != b.body || !replayed(r) {
			t.Errorf("bob's retry = %v; want bob's own %v", r, b)
		}
		if n, m := ran("POST", "/orders/mine", `"guessable-1"`, "Bearer alice"), ran("POST", "/orders/mine", `"guessable-1"`, "Bearer bob"); n != 1 || m != 1 {
			t.Errorf("the upstream ran alice's %d and bob's %d times; want 1 each", n, m)
		}
	})
}
