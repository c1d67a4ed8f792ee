package proxy

import (
	"bytes"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	itestutil "github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore/memstore"
)

func TestReplayIsByteForByte(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, nil)
	first := tp.do(t, "POST", "/ucp/v1/carts", "k1", `{"b":1,"a":[1,2]}`)
	if first.status != 201 {
		t.Fatalf("first = %v; want 201", first)
	}
	if first.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first answer has Idempotent-Replayed")
	}
	// Same request, other JSON formatting and key order: a replay.
	again := tp.do(t, "POST", "/ucp/v1/carts", "k1", "{ \"a\": [1, 2],\n \"b\": 1 }")
	if again.status != 201 || !bytes.Equal(again.body, first.body) {
		t.Fatalf("replay = %v; want %v", again, first)
	}
	if got := again.header.Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("Idempotent-Replayed = %q; want true", got)
	}
	for _, h := range []string{"Content-Type", "X-Execution"} {
		if again.header.Get(h) != first.header.Get(h) {
			t.Errorf("replayed %s = %q; want %q", h, again.header.Get(h), first.header.Get(h))
		}
	}
	if got, want := again.header.Values("Set-Cookie"), first.header.Values("Set-Cookie"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("replayed Set-Cookie = %q; want %q", got, want)
	}
	if again.header.Get("X-Request-Id") == first.header.Get("X-Request-Id") {
		t.Errorf("replay reused the first request's X-Request-Id")
	}
	if again.header.Get("Date") == "" || again.header.Get("Content-Length") != "41" && again.header.Get("Content-Length") == "" {
		t.Errorf("replay Date %q, Content-Length %q; want fresh values", again.header.Get("Date"), again.header.Get("Content-Length"))
	}
	if n := up.executions("POST", "/ucp/v1/carts", "k1"); n != 1 {
		t.Errorf("upstream executions = %d; want 1", n)
	}
}

func TestClaimOutcomes(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	release := make(chan struct{})
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.URL.Path {
		case "/ucp/v1/carts/hold":
			<-release
		case "/ucp/v1/carts/big":
			w.Write(bytes.Repeat([]byte("x"), 70<<10))
			return
		case "/ucp/v1/carts/missing":
			w.WriteHeader(404)
			return
		}
		w.WriteHeader(200)
		w.Write([]byte(r.URL.Path))
	}
	tp := newTestProxy(t, up.URL, nil)

	// In progress: the first request holds the key.
	done := make(chan result)
	go func() { done <- tp.do(t, "PUT", "/ucp/v1/carts/hold", "h", `{}`) }()
	itestutil.Eventually(t, 10*time.Second, "the held PUT to reach the upstream", func() bool { return up.executions("PUT", "/ucp/v1/carts/hold", "h") == 1 })
	r := tp.do(t, "PUT", "/ucp/v1/carts/hold", "h", `{}`)
	if r.status != 409 || problemCode(t, r) != "idempotency_in_progress" || r.header.Get("Retry-After") != "2" {
		t.Errorf("duplicate while running = %v (Retry-After %q); want 409 idempotency_in_progress, Retry-After 2", r, r.header.Get("Retry-After"))
	}
	// Another request with the same key: reused, no Retry-After.
	r = tp.do(t, "PUT", "/ucp/v1/carts/hold", "h", `{"other":1}`)
	if r.status != 409 || problemCode(t, r) != "idempotency_key_reused" || r.header.Get("Retry-After") != "" {
		t.Errorf("other request while running = %v; want 409 idempotency_key_reused without Retry-After", r)
	}
	close(release)
	if first := <-done; first.status != 200 {
		t.Fatalf("held request = %v; want 200", first)
	}
	// The mismatch did not poison the key.
	r = tp.do(t, "PUT", "/ucp/v1/carts/hold", "h", `{}`)
	if r.status != 200 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("original after mismatch = %v; want its replay", r)
	}
	// Case kept in the path: another request.
	r = tp.do(t, "PUT", "/ucp/v1/carts/HOLD", "h", `{}`)
	if r.status != 409 || problemCode(t, r) != "idempotency_key_reused" {
		t.Errorf("upper-case path id with the same key = %v; want key_reused", r)
	}

	// Too large: runs once, then 409 too large, never re-run.
	r = tp.do(t, "PUT", "/ucp/v1/carts/big", "b", `{}`)
	if r.status != 200 || len(r.body) != 70<<10 {
		t.Fatalf("big answer = %d, %d bytes; want 200 with every byte", r.status, len(r.body))
	}
	r = tp.do(t, "PUT", "/ucp/v1/carts/big", "b", `{}`)
	if r.status != 409 || problemCode(t, r) != "idempotency_response_too_large" {
		t.Errorf("retry of a too-large answer = %v; want 409 idempotency_response_too_large", r)
	}
	if n := up.executions("PUT", "/ucp/v1/carts/big", "b"); n != 1 {
		t.Errorf("big executions = %d; want 1", n)
	}

	// A release status frees the key: the retry runs again.
	for i := 1; i <= 2; i++ {
		r = tp.do(t, "PUT", "/ucp/v1/carts/missing", "m", `{}`)
		if r.status != 404 || r.header.Get("Idempotent-Replayed") != "" {
			t.Errorf("404 #%d = %v; want the upstream's 404, not a replay", i, r)
		}
		if n := up.executions("PUT", "/ucp/v1/carts/missing", "m"); n != i {
			t.Errorf("executions after 404 #%d = %d; want %d", i, n, i)
		}
	}
}

func TestReuseStatus422(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Idempotency.ReuseStatus = 422 })
	tp.do(t, "POST", "/ucp/v1/carts", "k", `{"a":1}`)
	r := tp.do(t, "POST", "/ucp/v1/carts", "k", `{"a":2}`)
	if r.status != 422 || problemCode(t, r) != "idempotency_key_reused" {
		t.Errorf("reused key = %v; want 422 idempotency_key_reused", r)
	}
}

// A route's own reuse_status, replay_header and max_body_bytes replace the global ones
// (internal/app gives every route the config's, so that a reload reaches
// them); a route without them inherits the global ones.
func TestRouteReuseStatusAndReplayHeader(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	none, custom := "", "X-Again"
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = []Route{
			{Name: "inherits", Method: "POST", Path: "/ucp/v1/carts", Idempotent: true},
			{Name: "none", Method: "POST", Path: "/none", Idempotent: true, ReuseStatus: 422, ReplayHeader: &none, MaxBodyBytes: 16},
			{Name: "custom", Method: "POST", Path: "/custom", Idempotent: true, ReplayHeader: &custom},
		}
	})
	for _, tc := range []struct {
		path, header string
		reuse        int
	}{
		{"/ucp/v1/carts", "Idempotent-Replayed", 409},
		{"/none", "", 422},
		{"/custom", "X-Again", 409},
	} {
		key := "k" + tc.path // keys are scoped to the client, not the route
		tp.do(t, "POST", tc.path, key, `{"a":1}`)
		rep := tp.do(t, "POST", tc.path, key, `{"a":1}`)
		for _, h := range []string{"Idempotent-Replayed", "X-Again"} {
			if got, want := rep.header.Get(h), map[bool]string{true: "true"}[h == tc.header]; got != want {
				t.Errorf("%s: replay's %s = %q; want %q", tc.path, h, got, want)
			}
		}
		if r := tp.do(t, "POST", tc.path, key, `{"a":2}`); r.status != tc.reuse || problemCode(t, r) != "idempotency_key_reused" {
			t.Errorf("%s: reused key = %v; want %d idempotency_key_reused", tc.path, r, tc.reuse)
		}
	}
	// The route's own max_body_bytes (16), and the global one (1 MiB).
	if r := tp.do(t, "POST", "/none", "big", `{"pad":"0123456789"}`); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("a 20-byte body on a route with max_body_bytes 16 = %v; want 413", r)
	}
	if r := tp.do(t, "POST", "/custom", "big", `{"pad":"0123456789"}`); r.status != http.StatusCreated {
		t.Errorf("a 20-byte body on a route that inherits = %v; want 201", r)
	}
}

// Stages.KeyHeader replaces Idempotency.Header on a reload: the key is
// read from the new header only, and an invalid one is named.
func TestKeyHeaderReloaded(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, nil)
	st := tp.p.Policy()
	st.Idempotency.Header = "X-Idem"
	if err := tp.p.Apply(st); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := tp.do(t, "POST", "/ucp/v1/carts", "", `{"a":1}`, "X-Idem", "new-h"); r.status != 201 {
			t.Fatalf("keyed by X-Idem = %v", r)
		}
	}
	if n := up.executions("POST", "/ucp/v1/carts", ""); n != 1 {
		t.Errorf("two writes keyed by X-Idem ran %d times upstream; want 1", n)
	}
	r := tp.do(t, "POST", "/ucp/v1/carts", "", `{"a":1}`, "X-Idem", "a b")
	if r.status != 400 || problemCode(t, r) != "idempotency_key_invalid" || !strings.Contains(string(r.body), "X-Idem is not valid") {
		t.Errorf("an invalid X-Idem = %v; want 400 idempotency_key_invalid naming X-Idem", r)
	}
}

func TestKeyCheck(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Idempotency.MaxBodyBytes = 1024
	})
	tests := []struct {
		name   string
		path   string
		keys   []string
		body   string
		status int
		code   string
	}{
		{"no key runs unprotected", "/ucp/v1/carts", nil, `{}`, 201, ""},
		{"empty key runs unprotected", "/ucp/v1/carts", []string{""}, `{}`, 201, ""},
		{"require_key", "/strict", nil, `{}`, 400, "idempotency_key_missing"},
		{"space", "/ucp/v1/carts", []string{"a b"}, `{}`, 400, "idempotency_key_invalid"},
		{"non-ascii", "/ucp/v1/carts", []string{"š"}, `{}`, 400, "idempotency_key_invalid"},
		{"256 chars", "/ucp/v1/carts", []string{strings.Repeat("k", 256)}, `{}`, 400, "idempotency_key_invalid"},
		{"255 chars", "/ucp/v1/carts", []string{strings.Repeat("k", 255)}, `{}`, 201, ""},
		{"one char", "/ucp/v1/carts", []string{"!"}, `{}`, 201, ""},
		{"repeated header", "/ucp/v1/carts", []string{"a", "b"}, `{}`, 400, "idempotency_key_invalid"},
		{"repeated same value", "/ucp/v1/carts", []string{"a", "a"}, `{}`, 400, "idempotency_key_invalid"},
		{"body too large", "/ucp/v1/carts", []string{"big"}, strings.Repeat("x", 1025), 413, "request_too_large"},
		{"body at the cap", "/ucp/v1/carts", []string{"cap"}, strings.Repeat("x", 1024), 201, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", tp.URL+tc.path, strings.NewReader(tc.body))
			for _, k := range tc.keys {
				req.Header.Add("Idempotency-Key", k)
			}
			res, err := tp.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			r := readResult(t, res)
			if r.status != tc.status || problemCode(t, r) != tc.code {
				t.Errorf("got %v; want %d %q", r, tc.status, tc.code)
			}
			if tc.status >= 400 && up.lastRequest() != nil && up.lastRequest().Header.Get("Idempotency-Key") != "" && up.lastRequest().Header.Get("Idempotency-Key") == strings.Join(tc.keys, ",") {
				t.Errorf("a refused request reached the upstream")
			}
		})
	}
	if strings.Contains(tp.logs.String(), `"outcome":"unprotected"`) == false {
		t.Errorf("no unprotected outcome logged")
	}
}

func TestChunkedBodyTooLarge(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Idempotency.MaxBodyBytes = 100 })
	req, _ := http.NewRequest("POST", tp.URL+"/ucp/v1/carts", struct{ *strings.Reader }{strings.NewReader(strings.Repeat("x", 101))})
	req.Header.Set("Idempotency-Key", "chunked")
	res, err := tp.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := readResult(t, res)
	if r.status != 413 || problemCode(t, r) != "request_too_large" {
		t.Errorf("chunked body over the cap = %v; want 413 request_too_large", r)
	}
	if up.total.Load() != 0 {
		t.Errorf("upstream ran %d times; want 0", up.total.Load())
	}
	// Nothing was claimed: a smaller body with the key runs.
	if r := tp.do(t, "POST", "/ucp/v1/carts", "chunked", `{}`); r.status != 201 {
		t.Errorf("after 413 = %v; want 201", r)
	}
}

func TestIdentityScope(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Stages.RequireIdentity = true })
	r := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`)
	if r.status != 400 || problemCode(t, r) != "idempotency_identity_missing" {
		t.Errorf("no identity = %v; want 400 idempotency_identity_missing", r)
	}
	a := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`, "Authorization", "Bearer alice")
	b := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`, "Authorization", "Bearer bob")
	if a.status != 201 || b.status != 201 || bytes.Equal(a.body, b.body) || b.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("two clients, one key: %v / %v; want two executions", a, b)
	}
	a2 := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`, "Authorization", "Bearer alice")
	if !bytes.Equal(a2.body, a.body) {
		t.Errorf("alice's retry = %v; want her answer %v", a2, a)
	}
	if strings.Contains(tp.logs.String(), "alice") || strings.Contains(tp.logs.String(), `"k"`) {
		t.Errorf("access log holds an Authorization value or a key:\n%s", tp.logs.String())
	}
}

// TestTenantHosts is issue 13's finding 3: one host rule (lower case, port
// and one trailing dot removed) decides the tenant; a host's trailing dot
// replays its own tenant's answer and never another tenant's; an unknown
// host's keyed write gets 421 tenant_unknown and never runs.
func TestTenantHosts(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Idempotency.TenantFor = tenantHosts(map[string]string{"shop-a.example": "a", "shop-b.example": "b", "alias-a.example": "a"})
	})
	do := func(host, key string) result {
		req, _ := http.NewRequest("POST", tp.URL+"/ucp/v1/carts", strings.NewReader(`{}`))
		req.Host = host
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		res, err := tp.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return readResult(t, res)
	}
	a := do("shop-a.example", "same")
	b := do("shop-b.example:8080", "same")
	alias := do("ALIAS-A.example", "same")
	if bytes.Equal(a.body, b.body) {
		t.Errorf("two tenants shared an answer")
	}
	if !bytes.Equal(a.body, alias.body) || alias.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("same tenant by another host = %v; want a's replay %v", alias, a)
	}
	if up.lastRequest().Host != "shop-b.example:8080" {
		t.Errorf("upstream Host = %q; want the client's", up.lastRequest().Host)
	}
	a2 := do("shop-a.example.", "dot")
	if a2.status != 201 {
		t.Fatalf("shop-a.example. = %v; want 201", a2)
	}
	if r := do("shop-a.example", "dot"); !bytes.Equal(r.body, a2.body) || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("shop-a.example after shop-a.example. = %v; want the replay %v (one tenant)", r, a2)
	}
	if r := do("shop-b.example.", "dot"); bytes.Equal(r.body, a2.body) || r.header.Get("Idempotent-Replayed") != "" || r.status != 201 {
		t.Errorf("shop-b.example. = %v; want its own first execution, never shop-a's answer %v", r, a2)
	}
	before := up.total.Load()
	for _, host := range []string{"unknown.example", "shop-a.example..", "shop-a.example.evil", "[::1]:8080"} {
		r := do(host, "same")
		if r.status != 421 || problemCode(t, r) != "tenant_unknown" {
			t.Errorf("keyed write to %q = %v; want 421 tenant_unknown", host, r)
		}
	}
	if n := up.total.Load() - before; n != 0 {
		t.Errorf("keyed writes to unknown hosts ran %d times; want 0", n)
	}
	if !strings.Contains(tp.logs.String(), `"outcome":"tenant_unknown"`) {
		t.Errorf("access log has no tenant_unknown outcome:\n%s", tp.logs.String())
	}
	// Unkeyed, an unknown host's write runs unprotected, as any other.
	if r := do("unknown.example", ""); r.status != 201 {
		t.Errorf("unkeyed write to an unknown host = %v; want the upstream's 201", r)
	}
}

func TestFingerprintIgnore(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, nil)
	a := tp.do(t, "PUT", "/ucp/v1/carts/1", "k", `{"items":[1],"meta":{"sent_at":"10:00"}}`)
	b := tp.do(t, "PUT", "/ucp/v1/carts/1", "k", `{"meta":{"sent_at":"10:01"},"items":[1]}`)
	if !bytes.Equal(a.body, b.body) || b.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry differing in an ignored member = %v; want replay of %v", b, a)
	}
	c := tp.do(t, "PUT", "/ucp/v1/carts/1", "k", `{"items":[2],"meta":{"sent_at":"10:01"}}`)
	if c.status != 409 {
		t.Errorf("other items = %v; want 409 key_reused", c)
	}
	d := tp.do(t, "PUT", "/ucp/v1/carts/1?x=1", "k", `{"items":[1]}`)
	if d.status != 409 {
		t.Errorf("other query = %v; want 409 key_reused", d)
	}
}

// TestConcurrentDuplicates is not parallel: its 4,000 requests would starve
// the other tests' short timeouts on a 2-core machine.
func TestConcurrentDuplicates(t *testing.T) {
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, nil)
	const keys, dups = 200, 20
	answers := make([][]string, keys)
	var wg sync.WaitGroup
	var mu sync.Mutex
	// 16 keys at a time, each with its 20 duplicates at once: 320 requests
	// in flight, which a loaded 2-core machine's loopback accepts without
	// dropping connections.
	const batch = 16
	for k := range keys {
		if k%batch == 0 {
			wg.Wait()
		}
		for range dups {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := "key-" + string(rune('A'+k%26)) + strings.Repeat("x", k/26)
				for attempt := 0; attempt < 500; attempt++ {
					r := tp.do(t, "POST", "/ucp/v1/carts", key, `{"k":1}`)
					if r.status == 409 && r.header.Get("Retry-After") == "2" {
						time.Sleep(time.Millisecond) // a client's retry pause, bounded by the loop
						continue
					}
					mu.Lock()
					answers[k] = append(answers[k], r.String())
					mu.Unlock()
					return
				}
				t.Errorf("key %d: still in progress after 500 retries", k)
			}()
		}
	}
	wg.Wait()
	if got := up.total.Load(); got != keys {
		t.Errorf("upstream executions = %d; want exactly %d", got, keys)
	}
	for k, a := range answers {
		if len(a) != dups {
			t.Errorf("key %d: %d answers; want %d", k, len(a), dups)
			continue
		}
		for _, x := range a[1:] {
			if x != a[0] {
				t.Errorf("key %d: answers differ: %q vs %q", k, x, a[0])
				break
			}
		}
	}
}

func readResult(t *testing.T, res *http.Response) result {
	t.Helper()
	defer res.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(res.Body); err != nil {
		t.Fatal(err)
	}
	return result{res.StatusCode, res.Header, b.Bytes()}
}

// TestRetryAfterAnswerReplays: the answer is stored before its last bytes
// reach the client, so a retry sent right after an answer arrived replays it
// (never a 409 in progress), with and without Content-Length.
func TestRetryAfterAnswerReplays(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Query().Get("chunked") != "" {
			w.Write([]byte("part one, "))
			http.NewResponseController(w).Flush()
		}
		w.Write([]byte("answer"))
	}
	tp := newTestProxy(t, up.URL, nil)
	for _, q := range []string{"", "?chunked=1"} {
		for i := range 100 {
			key := "retry-" + q + string(rune('a'+i%26)) + strings.Repeat("z", i/26)
			first := tp.do(t, "POST", "/ucp/v1/carts"+q, key, `{}`)
			again := tp.do(t, "POST", "/ucp/v1/carts"+q, key, `{}`)
			if again.status != first.status || !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("retry right after the answer (%q, #%d) = %v; want the replay of %v", q, i, again, first)
			}
		}
	}
}
