package demo

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// clock is a settable fake clock.
type clock struct {
	mu  sync.Mutex // protects now
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// start serves a new Server with opts (and a fixed clock when opts.Now is
// nil) over a real listener.
func start(t *testing.T, opts Options) (*Server, *httptest.Server) {
	t.Helper()
	if opts.Now == nil {
		opts.Now = func() time.Time { return t0 }
	}
	s := New(opts)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, ts *httptest.Server, method, path, body string) response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{res.StatusCode, res.Header, b}
}

// decode unmarshals a JSON answer into a generic map.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("answer %q is not a JSON object: %v", b, err)
	}
	return m
}

// errCode returns the error code of a JSON error answer.
func errCode(t *testing.T, b []byte) string {
	t.Helper()
	var e errorJSON
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("answer %q is not a JSON error: %v", b, err)
	}
	return e.Error.Code
}

// compact re-encodes a JSON value without whitespace, for comparisons.
func compact(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCreateCart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		body      string
		status    int
		items     string // on success
		code      string // on failure
		maxBody   int64
		wantCount int64
	}{
		{name: "items", body: `{"items":[{"sku":"tee","qty":2},"x",1]}`, status: 201,
			items: `[{"qty":2,"sku":"tee"},"x",1]`, wantCount: 1},
		{name: "whitespace", body: " \n{ \"items\" : [ 1 , 2 ] }\n", status: 201, items: `[1,2]`, wantCount: 1},
		{name: "no items", body: `{"note":"hi"}`, status: 201, items: `[]`, wantCount: 1},
		{name: "null items", body: `{"items":null}`, status: 201, items: `[]`, wantCount: 1},
		{name: "invalid JSON", body: `{"items":[`, status: 400, code: "invalid_json"},
		{name: "empty body", body: ``, status: 400, code: "invalid_json"},
		{name: "null body", body: `null`, status: 400, code: "invalid_json"},
		{name: "array body", body: `[]`, status: 400, code: "invalid_json"},
		{name: "trailing data", body: `{"items":[]} {}`, status: 400, code: "invalid_json"},
		{name: "items not array", body: `{"items":{"sku":"tee"}}`, status: 400, code: "invalid_items"},
		{name: "too large", body: `{"items":["0123456789"]}`, maxBody: 10, status: 413, code: "request_too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, ts := start(t, Options{MaxBodyBytes: tt.maxBody})
			res := do(t, ts, "POST", "/ucp/v1/carts", tt.body)
			if res.status != tt.status {
				t.Fatalf("status = %d; want %d (body %s)", res.status, tt.status, res.body)
			}
			if got := res.header.Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type = %q; want %q", got, "application/json")
			}
			if got := s.Stats().Executions; got != tt.wantCount {
				t.Errorf("Stats().Executions = %d; want %d", got, tt.wantCount)
			}
			if tt.status != 201 {
				if got := errCode(t, res.body); got != tt.code {
					t.Errorf("error code = %q; want %q", got, tt.code)
				}
				return
			}
			if got, want := res.header.Get("Location"), "/ucp/v1/carts/cart_1"; got != want {
				t.Errorf("Location = %q; want %q", got, want)
			}
			m := decode(t, res.body)
			want := map[string]any{
				"id":         "cart_1",
				"status":     "open",
				"created_at": "2026-01-02T03:04:05Z",
				"updated_at": "2026-01-02T03:04:05Z",
				"execution":  1.0,
			}
			for k, v := range want {
				if m[k] != v {
					t.Errorf("%s = %v; want %v", k, m[k], v)
				}
			}
			if got := compact(t, m["items"]); got != tt.items {
				t.Errorf("items = %s; want %s", got, tt.items)
			}
		})
	}
}

// TestLifecycle walks one cart through every route, in order, checking the
// answers and the counts.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	clk := &clock{now: t0}
	s, ts := start(t, Options{Now: clk.Now})

	steps := []struct {
		method, path, body string
		status             int
		want               map[string]any // members of the JSON answer
		code               string         // error code, when want is nil
		location           string
	}{
		{"POST", "/ucp/v1/carts", `{"items":["a"]}`, 201,
			map[string]any{"id": "cart_1", "execution": 1.0}, "", "/ucp/v1/carts/cart_1"},
		{"POST", "/ucp/v1/carts", `{"items":["b"]}`, 201,
			map[string]any{"id": "cart_2", "execution": 2.0}, "", "/ucp/v1/carts/cart_2"},
		{"GET", "/ucp/v1/carts/cart_1", "", 200,
			map[string]any{"id": "cart_1", "status": "open", "items": []any{"a"}, "execution": nil, "order_id": nil}, "", ""},
		{"PUT", "/ucp/v1/carts/cart_1", `{"items":["a","c"]}`, 200,
			map[string]any{"id": "cart_1", "items": []any{"a", "c"}, "execution": 3.0,
				"created_at": "2026-01-02T03:05:05Z", "updated_at": "2026-01-02T03:08:05Z"}, "", ""},
		{"GET", "/ucp/v1/carts/cart_1", "", 200,
			map[string]any{"items": []any{"a", "c"}, "updated_at": "2026-01-02T03:08:05Z"}, "", ""},
		{"POST", "/ucp/v1/checkout-sessions/cart_1/complete", `{"payment":{"token":"tok"}}`, 201,
			map[string]any{"id": "order_1", "cart_id": "cart_1", "items": []any{"a", "c"}, "status": "completed",
				"execution": 4.0, "created_at": "2026-01-02T03:10:05Z"}, "", "/ucp/v1/orders/order_1"},
		{"GET", "/ucp/v1/orders/order_1", "", 200,
			map[string]any{"id": "order_1", "cart_id": "cart_1", "status": "completed", "execution": nil}, "", ""},
		{"GET", "/ucp/v1/carts/cart_1", "", 200,
			map[string]any{"status": "checked_out", "order_id": "order_1"}, "", ""},
		// The duplicate-write harm: a retried checkout fails.
		{"POST", "/ucp/v1/checkout-sessions/cart_1/complete", `{"payment":{"token":"tok"}}`, 409,
			nil, "cart_checked_out", ""},
		{"PUT", "/ucp/v1/carts/cart_1", `{"items":[]}`, 409, nil, "cart_checked_out", ""},
		{"POST", "/ucp/v1/checkout-sessions/cart_2/complete", "", 201,
			map[string]any{"id": "order_2", "cart_id": "cart_2", "execution": 7.0}, "", "/ucp/v1/orders/order_2"},
	}
	for i, st := range steps {
		clk.Add(time.Minute)
		res := do(t, ts, st.method, st.path, st.body)
		name := fmt.Sprintf("step %d: %s %s", i, st.method, st.path)
		if res.status != st.status {
			t.Fatalf("%s: status = %d; want %d (body %s)", name, res.status, st.status, res.body)
		}
		if got := res.header.Get("Location"); got != st.location {
			t.Errorf("%s: Location = %q; want %q", name, got, st.location)
		}
		if st.want == nil {
			if got := errCode(t, res.body); got != st.code {
				t.Errorf("%s: error code = %q; want %q", name, got, st.code)
			}
			continue
		}
		m := decode(t, res.body)
		for k, v := range st.want {
			if got, want := compact(t, m[k]), compact(t, v); got != want {
				t.Errorf("%s: %s = %s; want %s", name, k, got, want)
			}
		}
	}

	want := Stats{
		Executions: 7,
		ByRoute: map[string]int64{
			"POST /ucp/v1/carts":                           2,
			"PUT /ucp/v1/carts/{id}":                       2,
			"POST /ucp/v1/checkout-sessions/{id}/complete": 3,
		},
		Carts:  2,
		Orders: 2,
	}
	got := s.Stats()
	if compact(t, got) != compact(t, want) {
		t.Errorf("Stats() = %+v; want %+v", got, want)
	}
	res := do(t, ts, "GET", "/demo/stats", "")
	if res.status != 200 {
		t.Fatalf("GET /demo/stats: status = %d; want 200", res.status)
	}
	var fromHTTP Stats
	if err := json.Unmarshal(res.body, &fromHTTP); err != nil {
		t.Fatal(err)
	}
	if compact(t, fromHTTP) != compact(t, want) {
		t.Errorf("GET /demo/stats = %s; want %s", res.body, compact(t, want))
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, path, body string
		status                   int
		code                     string
		allow                    string
		counted                  bool // whether the request counts as an execution
	}{
		{"get unknown cart", "GET", "/ucp/v1/carts/cart_9", "", 404, "cart_not_found", "", false},
		{"cart id case kept", "GET", "/ucp/v1/carts/CART_1", "", 404, "cart_not_found", "", false},
		{"put unknown cart", "PUT", "/ucp/v1/carts/cart_9", `{"items":[]}`, 404, "cart_not_found", "", true},
		{"complete unknown cart", "POST", "/ucp/v1/checkout-sessions/cart_9/complete", "", 404, "cart_not_found", "", true},
		{"get unknown order", "GET", "/ucp/v1/orders/order_9", "", 404, "order_not_found", "", false},
		{"unknown path", "GET", "/nope", "", 404, "not_found", "", false},
		{"root", "GET", "/", "", 404, "not_found", "", false},
		{"carts trailing slash", "POST", "/ucp/v1/carts/", "{}", 404, "not_found", "", false},
		{"cart trailing slash", "GET", "/ucp/v1/carts/cart_1/", "", 404, "not_found", "", false},
		{"extra segment", "GET", "/ucp/v1/orders/order_1/x", "", 404, "not_found", "", false},
		{"put invalid JSON", "PUT", "/ucp/v1/carts/cart_1", `{`, 400, "invalid_json", "", false},
		{"put items not array", "PUT", "/ucp/v1/carts/cart_1", `{"items":"x"}`, 400, "invalid_items", "", false},
		{"complete invalid JSON", "POST", "/ucp/v1/checkout-sessions/cart_1/complete", `{`, 400, "invalid_json", "", false},
		{"bad delay", "POST", "/ucp/v1/carts?delay=soon", `{}`, 400, "invalid_delay", "", false},
		{"negative delay", "POST", "/ucp/v1/carts?delay=-1s", `{}`, 400, "invalid_delay", "", false},
		{"delete cart", "DELETE", "/ucp/v1/carts/cart_1", "", 405, "method_not_allowed", "GET, HEAD, PUT", false},
		{"get carts", "GET", "/ucp/v1/carts", "", 405, "method_not_allowed", "POST", false},
		{"get complete", "GET", "/ucp/v1/checkout-sessions/cart_1/complete", "", 405, "method_not_allowed", "POST", false},
		{"post order", "POST", "/ucp/v1/orders/order_1", "{}", 405, "method_not_allowed", "GET, HEAD", false},
		{"post stats", "POST", "/demo/stats", "{}", 405, "method_not_allowed", "GET, HEAD", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, ts := start(t, Options{})
			if res := do(t, ts, "POST", "/ucp/v1/carts", `{"items":[1]}`); res.status != 201 {
				t.Fatalf("creating cart_1: status = %d; want 201", res.status)
			}
			res := do(t, ts, tt.method, tt.path, tt.body)
			if res.status != tt.status {
				t.Fatalf("status = %d; want %d (body %s)", res.status, tt.status, res.body)
			}
			if got := res.header.Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type = %q; want %q", got, "application/json")
			}
			if got := errCode(t, res.body); got != tt.code {
				t.Errorf("error code = %q; want %q", got, tt.code)
			}
			if got := res.header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow = %q; want %q", got, tt.allow)
			}
			want := int64(1)
			if tt.counted {
				want = 2
			}
			st := s.Stats()
			if st.Executions != want {
				t.Errorf("Stats().Executions = %d; want %d", st.Executions, want)
			}
			if st.Carts != 1 || st.Orders != 0 {
				t.Errorf("Stats() carts, orders = %d, %d; want 1, 0", st.Carts, st.Orders)
			}
		})
	}
}

func TestCapacity(t *testing.T) {
	t.Parallel()
	s, ts := start(t, Options{MaxCarts: 2})
	for i, want := range []int{201, 201, 503} {
		res := do(t, ts, "POST", "/ucp/v1/carts", `{}`)
		if res.status != want {
			t.Fatalf("create %d: status = %d; want %d", i+1, res.status, want)
		}
		if want == 503 {
			if got := errCode(t, res.body); got != "capacity_exceeded" {
				t.Errorf("error code = %q; want %q", got, "capacity_exceeded")
			}
		}
	}
	if got := s.Stats(); got.Carts != 2 || got.Executions != 3 {
		t.Errorf("Stats() carts, executions = %d, %d; want 2, 3", got.Carts, got.Executions)
	}
}

// TestConcurrentCreates checks that racing creates each get their own id and
// execution number, and that none is lost.
func TestConcurrentCreates(t *testing.T) {
	t.Parallel()
	const n = 64
	s, ts := start(t, Options{})

	var wg sync.WaitGroup
	ids := make([]string, n)
	execs := make([]int, n)
	for i := range n {
		wg.Go(func() {
			res := do(t, ts, "POST", "/ucp/v1/carts", fmt.Sprintf(`{"items":[%d]}`, i))
			if res.status != 201 {
				t.Errorf("status = %d; want 201", res.status)
				return
			}
			var c cartJSON
			if err := json.Unmarshal(res.body, &c); err != nil {
				t.Error(err)
				return
			}
			if got, want := string(c.Items), fmt.Sprintf("[%d]", i); got != want {
				t.Errorf("items = %s; want %s", got, want)
			}
			ids[i], execs[i] = c.ID, int(c.Execution)
		})
	}
	wg.Wait()

	wantIDs := make([]string, n)
	wantExecs := make([]int, n)
	for i := range n {
		wantIDs[i] = fmt.Sprintf("cart_%d", i+1)
		wantExecs[i] = i + 1
	}
	slices.SortFunc(ids, func(a, b string) int { // cart_2 before cart_10
		return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
	})
	slices.Sort(execs)
	if !slices.Equal(ids, wantIDs) {
		t.Errorf("ids = %v; want %v", ids, wantIDs)
	}
	if !slices.Equal(execs, wantExecs) {
		t.Errorf("executions = %v; want %v", execs, wantExecs)
	}
	got := s.Stats()
	want := Stats{Executions: n, ByRoute: map[string]int64{"POST /ucp/v1/carts": n}, Carts: n}
	if got.Executions != want.Executions || got.Carts != want.Carts || got.Orders != 0 ||
		!maps.Equal(got.ByRoute, want.ByRoute) {
		t.Errorf("Stats() = %+v; want %+v", got, want)
	}
}

// TestConcurrentCheckout checks that of racing checkouts of one cart
// exactly one wins, and the rest are the 409 duplicate-write harm.
func TestConcurrentCheckout(t *testing.T) {
	t.Parallel()
	const n = 32
	s, ts := start(t, Options{})
	if res := do(t, ts, "POST", "/ucp/v1/carts", `{"items":[1]}`); res.status != 201 {
		t.Fatalf("create: status = %d; want 201", res.status)
	}

	var (
		mu     sync.Mutex // protects counts
		counts = map[int]int{}
		wg     sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			res := do(t, ts, "POST", "/ucp/v1/checkout-sessions/cart_1/complete", "")
			mu.Lock()
			counts[res.status]++
			mu.Unlock()
		})
	}
	wg.Wait()

	if want := map[int]int{201: 1, 409: n - 1}; !maps.Equal(counts, want) {
		t.Errorf("statuses = %v; want %v", counts, want)
	}
	got := s.Stats()
	if got.Orders != 1 || got.Executions != n+1 || got.ByRoute[patComplete] != n {
		t.Errorf("Stats() = %+v; want 1 order, %d executions, %d checkouts", got, n+1, n)
	}
}

// TestDelay runs in a synctest bubble, so the delays pass in fake time and
// can be measured exactly.
func TestDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, method, path, body string
		timeout                  time.Duration // of the request's context; 0 for none
		status                   int
		elapsed                  time.Duration
		executions               int64
	}{
		{"create", "POST", "/ucp/v1/carts?delay=200ms", `{}`, 0, 201, 200 * time.Millisecond, 1},
		{"zero", "POST", "/ucp/v1/carts?delay=0s", `{}`, 0, 201, 0, 1},
		{"capped", "POST", "/ucp/v1/carts?delay=1h", `{}`, 0, 201, maxDelay, 1},
		{"put", "PUT", "/ucp/v1/carts/cart_1?delay=1s", `{"items":[2]}`, 0, 200, time.Second, 1},
		{"complete", "POST", "/ucp/v1/checkout-sessions/cart_1/complete?delay=1.5s", ``, 0, 201, 1500 * time.Millisecond, 1},
		{"get ignores delay", "GET", "/ucp/v1/carts/cart_1?delay=1s", ``, 0, 200, 0, 0},
		{"cancelled", "POST", "/ucp/v1/carts?delay=1s", `{}`, 300 * time.Millisecond, 503, 300 * time.Millisecond, 0},
		{"cancelled checkout", "POST", "/ucp/v1/checkout-sessions/cart_1/complete?delay=1s", ``,
			300 * time.Millisecond, 503, 300 * time.Millisecond, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := New(Options{})
				// cart_1 exists, made without counting it.
				s.carts["cart_1"] = &cart{id: "cart_1", items: json.RawMessage(`[1]`)}

				req := httptest.NewRequest(tt.method, tt.path, strings.NewReader(tt.body))
				if tt.timeout > 0 {
					ctx, cancel := context.WithTimeout(req.Context(), tt.timeout)
					defer cancel()
					req = req.WithContext(ctx)
				}
				rec := httptest.NewRecorder()
				start := time.Now()
				s.ServeHTTP(rec, req)
				if got := time.Since(start); got != tt.elapsed {
					t.Errorf("elapsed = %v; want %v", got, tt.elapsed)
				}
				if rec.Code != tt.status {
					t.Errorf("status = %d; want %d (body %s)", rec.Code, tt.status, rec.Body)
				}
				st := s.Stats()
				if st.Executions != tt.executions {
					t.Errorf("Stats().Executions = %d; want %d", st.Executions, tt.executions)
				}
				if tt.status == 503 {
					if got := errCode(t, rec.Body.Bytes()); got != "cancelled" {
						t.Errorf("error code = %q; want %q", got, "cancelled")
					}
					if st.Carts != 1 || st.Orders != 0 {
						t.Errorf("Stats() carts, orders = %d, %d; want 1, 0", st.Carts, st.Orders)
					}
				}
			})
		})
	}
}

func TestStatsIsSnapshot(t *testing.T) {
	t.Parallel()
	s, ts := start(t, Options{})
	do(t, ts, "POST", "/ucp/v1/carts", `{}`)
	st := s.Stats()
	st.ByRoute[patCreateCart] = 100
	if got := s.Stats().ByRoute[patCreateCart]; got != 1 {
		t.Errorf("after changing a snapshot, ByRoute[%q] = %d; want 1", patCreateCart, got)
	}

	empty := New(Options{}).Stats()
	if got, want := compact(t, empty), `{"executions":0,"by_route":{},"carts":0,"orders":0}`; got != want {
		t.Errorf("Stats() of a new server = %s; want %s", got, want)
	}
}
