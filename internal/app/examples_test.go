package app

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/testutil"
)

// exampleApp starts idemgate on examples/name in front of up and returns
// its base URL.
func exampleApp(t *testing.T, name, up string) string {
	t.Helper()
	cfg, err := config.Load("../../examples/" + name)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream.URL = up
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return serveTestApp(t, a)
}

// shopUpstream is a small UCP shop: it numbers its executions, takes
// 'delay' per request and records the most requests it ran at once per
// session (the path's id).
type shopUpstream struct {
	*httptest.Server
	execs   atomic.Int64
	delay   atomic.Int64 // nanoseconds
	mu      sync.Mutex
	running map[string]int
	maxRun  map[string]int
}

func newShop(t *testing.T) *shopUpstream {
	s := &shopUpstream{running: map[string]int{}, maxRun: map[string]int{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := s.execs.Add(1)
		parts := strings.Split(r.URL.Path, "/")
		session := ""
		if len(parts) > 4 {
			session = parts[4]
		}
		s.mu.Lock()
		s.running[session]++
		s.maxRun[session] = max(s.maxRun[session], s.running[session])
		s.mu.Unlock()
		time.Sleep(time.Duration(s.delay.Load()))
		s.mu.Lock()
		s.running[session]--
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		status := http.StatusOK
		if r.Method == http.MethodPost {
			status = http.StatusCreated
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"id":"cart-%d","execution":%d,"agent":%q,"request":%q}`, n, n, r.Header.Get("UCP-Agent"), body)
	}))
	t.Cleanup(s.Close)
	return s
}

type ucpAnswer struct {
	status int
	header http.Header
	body   string
}

// ucp sends one UCP call as the chapter's clients do.
func ucp(t *testing.T, method, url, agent, key, body string) ucpAnswer {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if agent != "" {
		req.Header.Set("UCP-Agent", agent)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return ucpAnswer{res.StatusCode, res.Header, string(b)}
}

// ucpCode returns the code of a UCP error body, failing when the body is
// not one.
func ucpCode(t *testing.T, a ucpAnswer) string {
	t.Helper()
	var e struct {
		UCP      struct{ Status string }
		Messages []struct{ Type, Code, Content string }
	}
	if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.UCP.Status != "error" || len(e.Messages) != 1 || a.header.Get("Content-Type") != "application/json" {
		t.Fatalf("not a UCP error: %d %s %s (%v)", a.status, a.header.Get("Content-Type"), a.body, err)
	}
	return e.Messages[0].Code
}

// TestExampleUCP drives the chapter's flows through examples/ucp.yaml. It is
// README's "Fronting UCP" walkthrough, step by step.
func TestExampleUCP(t *testing.T) {
	t.Setenv("IDEMGATE_ENCRYPTION_KEY", "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=") // the probe's sealed identity
	shop := newShop(t)
	base := exampleApp(t, "ucp.yaml", shop.URL) + "/ucp/v1"
	const agent = `profile="https://platform.example.com/.well-known/ucp"`
	const cart = `{"line_items":[{"item":{"id":"1e8a6c4f-2b93-4d71-9f05-6a3c8e2b1d47"},"quantity":1}],"context":{"language":"sk"}}`

	// 1. A create with a key, then its retry: the stored answer, unmarked.
	first := ucp(t, "POST", base+"/carts", agent, "key-1", cart)
	retry := ucp(t, "POST", base+"/carts", agent, "key-1", strings.ReplaceAll(cart, `"quantity":1`, ` "quantity" : 1`))
	if first.status != 201 || retry.status != 201 || retry.body != first.body || shop.execs.Load() != 1 {
		t.Fatalf("create and retry: %d %s / %d %s, %d executions", first.status, first.body, retry.status, retry.body, shop.execs.Load())
	}
	if _, marked := retry.header["Idempotent-Replayed"]; marked {
		t.Error("the replay is marked; UCP sends no marker")
	}
	// 2. The same key with another body: 409 in the UCP error shape.
	if a := ucp(t, "POST", base+"/carts", agent, "key-1", `{"line_items":[]}`); a.status != 409 || ucpCode(t, a) != "idempotency_key_reused" {
		t.Errorf("reused key = %d %s", a.status, a.body)
	}
	// 3. An invalid key (a header sent twice arrives joined with ", "):
	// 400 invalid_request "Idempotency-Key is not valid", nothing runs.
	a := ucp(t, "POST", base+"/carts", agent, "a, b", cart)
	if a.status != 400 || ucpCode(t, a) != "invalid_request" || !strings.Contains(a.body, "Idempotency-Key is not valid") || strings.Contains(a.body, "request_id") {
		t.Errorf("invalid key = %d %s", a.status, a.body)
	}
	// 4. Without a key the write simply runs, every time.
	before := shop.execs.Load()
	ucp(t, "POST", base+"/carts", agent, "", cart)
	ucp(t, "POST", base+"/carts", agent, "", cart)
	if got := shop.execs.Load() - before; got != 2 {
		t.Errorf("two unkeyed creates ran %d times, want 2", got)
	}
	// 5. Another profile with the same key never sees this one's answer.
	other := ucp(t, "POST", base+"/carts", `profile="https://other.example/ucp"`, "key-1", cart)
	if other.status != 201 || other.body == first.body {
		t.Errorf("another profile's key-1 = %d %s, want a first use", other.status, other.body)
	}
	// 6. The retry of a write still running: 409 with Retry-After: 2.
	shop.delay.Store(int64(400 * time.Millisecond))
	done := make(chan ucpAnswer, 1)
	go func() {
		req, _ := http.NewRequest("PUT", base+"/checkout-sessions/co-1", strings.NewReader(`{}`))
		req.Header.Set("UCP-Agent", agent)
		req.Header.Set("Content-Type", "application/json") // as its retry: the body's kind is part of the request
		req.Header.Set("Idempotency-Key", "key-put")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- ucpAnswer{}
			return
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		done <- ucpAnswer{res.StatusCode, res.Header, string(b)}
	}()
	time.Sleep(100 * time.Millisecond)
	// The GET of the same checkout takes the session's turn: it runs after
	// the PUT, never beside it.
	get := make(chan ucpAnswer, 1)
	go func() {
		req, _ := http.NewRequest("GET", base+"/checkout-sessions/co-1", nil)
		req.Header.Set("UCP-Agent", agent)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			get <- ucpAnswer{}
			return
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		get <- ucpAnswer{status: res.StatusCode}
	}()
	if a := ucp(t, "PUT", base+"/checkout-sessions/co-1", agent, "key-put", `{}`); a.status != 409 || a.header.Get("Retry-After") != "2" || ucpCode(t, a) != "request_in_progress" {
		t.Errorf("retry while running = %d %v %s", a.status, a.header, a.body)
	}
	if a := <-done; a.status != 200 {
		t.Errorf("PUT = %d %s", a.status, a.body)
	}
	if g := <-get; g.status != 200 {
		t.Errorf("GET = %d", g.status)
	}
	shop.mu.Lock()
	if shop.maxRun["co-1"] != 1 {
		t.Errorf("%d requests ran at once on checkout co-1, want 1 (GET takes a turn)", shop.maxRun["co-1"])
	}
	shop.mu.Unlock()
	shop.delay.Store(0)
	// 7. The handoff's 60 a minute: the 61st is refused and starts a
	// 60-second block, 429 rate_limited with Retry-After: 60.
	for i := range 60 {
		if a := ucp(t, "GET", base+"/handoff/h1", agent, "", ""); a.status != 200 {
			t.Fatalf("handoff %d = %d %s", i+1, a.status, a.body)
		}
	}
	for range 2 {
		if a := ucp(t, "GET", base+"/handoff/h1", agent, "", ""); a.status != 429 || a.header.Get("Retry-After") != "60" || ucpCode(t, a) != "rate_limited" {
			t.Errorf("over the handoff limit = %d %v %s", a.status, a.header, a.body)
		}
	}
}

// TestExamplePrynt drives Prynt's flows through examples/prynt-graphql.yaml:
// mutations keyed, queries not, conflicts as GraphQL errors with Prynt's
// codes and the CONFLICT class.
func TestExamplePrynt(t *testing.T) {
	var execs atomic.Int64
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := execs.Add(1)
		if r.Header.Get("Idempotency-Key") == "slow" {
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"data":{"createOrder":{"id":"o-%d"}}}`, n)
	}))
	t.Cleanup(up.Close)
	base := exampleApp(t, "prynt-graphql.yaml", up.URL) + "/api/v1/graphql"
	gql := func(key, body string) ucpAnswer {
		req, _ := http.NewRequest("POST", base, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer integration-1")
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return ucpAnswer{res.StatusCode, res.Header, string(b)}
	}
	gqlError := func(a ucpAnswer) (code, class string) {
		t.Helper()
		var e struct {
			Errors []struct {
				Extensions struct{ Code, Class string }
			}
		}
		if err := json.Unmarshal([]byte(a.body), &e); err != nil || len(e.Errors) != 1 {
			t.Fatalf("not a GraphQL error: %d %s", a.status, a.body)
		}
		return e.Errors[0].Extensions.Code, e.Errors[0].Extensions.Class
	}
	const m = `{"query":"mutation { createOrder(input: {x: 1}) { id } }"}`
	first := gql("k1", m)
	replay := gql("k1", `{"query":"mutation {\n  createOrder(input: {x: 1}) { id }\n}"}`)
	if first.status != 200 || replay.body != first.body || replay.header.Get("Idempotent-Replayed") != "true" || execs.Load() != 1 {
		t.Fatalf("mutation and retry: %s / %s %v, %d executions", first.body, replay.body, replay.header, execs.Load())
	}
	if a := gql("k1", `{"query":"mutation { createOrder(input: {x: 2}) { id } }"}`); a.status != 409 {
		t.Errorf("reused key = %d %s", a.status, a.body)
	} else if code, class := gqlError(a); code != "API_IDEMPOTENCY_KEY_REUSED" || class != "CONFLICT" {
		t.Errorf("reused key = %s %s", code, class)
	}
	if a := gql(strings.Repeat("k", 256), m); a.status != 400 {
		t.Errorf("invalid key = %d %s", a.status, a.body)
	} else if code, class := gqlError(a); code != "API_IDEMPOTENCY_KEY_INVALID" || class != "BAD_REQUEST" {
		t.Errorf("invalid key = %s %s", code, class)
	}
	// Queries ignore the key: they run every time.
	before := execs.Load()
	gql("q", `{"query":"{ orders { id } }"}`)
	gql("q", `{"query":"{ orders { id } }"}`)
	if execs.Load()-before != 2 {
		t.Errorf("two queries ran %d times", execs.Load()-before)
	}
	// A mutation still running: 409 CONFLICT API_IDEMPOTENCY_IN_PROGRESS.
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequest("POST", base, strings.NewReader(m))
		req.Header.Set("Authorization", "Bearer integration-1")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "slow")
		if res, err := http.DefaultClient.Do(req); err == nil {
			res.Body.Close()
		}
	}()
	testutil.Eventually(t, 5*time.Second, "the slow mutation to arrive", func() bool { return execs.Load() != before+2 })
	a := gql("slow", m)
	close(release)
	<-done
	if a.status != 409 || a.header.Get("Retry-After") != "2" {
		t.Errorf("in progress = %d %v %s", a.status, a.header, a.body)
	} else if code, class := gqlError(a); code != "API_IDEMPOTENCY_IN_PROGRESS" || class != "CONFLICT" {
		t.Errorf("in progress = %s %s", code, class)
	}
}
