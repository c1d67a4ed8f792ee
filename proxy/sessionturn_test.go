package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/pathtmpl"
	"github.com/idemgate/idemgate/internal/redistest"
	itestutil "github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/session"
	"github.com/idemgate/idemgate/session/redislock"
)

var sessionRoutes = []Route{
	{Name: "update_cart", Method: "PUT", Path: "/carts/{id}", Idempotent: true, Session: Session{Param: "id"}},
	{Name: "get_cart", Method: "GET", Path: "/carts/{id}", Session: Session{Param: "id"}},
	{Name: "add_item", Method: "POST", Path: "/shops/{shop}/carts/{cart}/items", Idempotent: true, Session: Session{Param: "cart"}},
	{Name: "update_order", Method: "PUT", Path: "/orders/{id}", Idempotent: true, Session: Session{Param: "id"}},
	{Name: "checkout", Method: "POST", Path: "/checkout", Idempotent: true, Session: Session{Header: "X-Cart-Id"}},
}

// sessionCounters is a session.Metrics that counts, for the tests.
type sessionCounters struct {
	waiting   atomic.Int64
	canceled  atomic.Int64
	full      atomic.Int64
	timeouts  atomic.Int64
	fallbacks atomic.Int64
}

func (c *sessionCounters) Waiting(d int) { c.waiting.Add(int64(d)) }
func (c *sessionCounters) Waited(_ time.Duration, r session.Result) {
	if r == session.ResultCanceled {
		c.canceled.Add(1)
	}
}
func (c *sessionCounters) Rejected(r session.Result) {
	switch r {
	case session.ResultFull:
		c.full.Add(1)
	case session.ResultTimeout:
		c.timeouts.Add(1)
	}
}
func (c *sessionCounters) Fallback() { c.fallbacks.Add(1) }

// newSessionUpstream is a real loopback API that records, per path (one
// session per path in these tests), how many requests it ran at once, and
// the order in which keyed requests arrived. A request with X-Hold waits
// until the upstream opens; X-Work makes it take that long.
func newSessionUpstream(t *testing.T) *itestutil.HeldUpstream {
	return itestutil.NewHeldUpstream(t, itestutil.HeldOptions{
		Hold: func(r *http.Request) bool { return r.Header.Get("X-Hold") != "" },
		Answer: func(w http.ResponseWriter, r *http.Request, n int) {
			if d, err := time.ParseDuration(r.Header.Get("X-Work")); err == nil {
				// Simulated work of the upstream, not a synchronization.
				select {
				case <-time.After(d):
				case <-r.Context().Done():
				}
			}
			itestutil.WriteCreated(w, r, n)
		},
	})
}

// newSessionProxy is a memory-store proxy with the session routes and a
// local session queue.
func newSessionProxy(t *testing.T, up string, qopts session.Options, mod func(*Options)) *testProxy {
	t.Helper()
	q, err := session.New(qopts)
	if err != nil {
		t.Fatal(err)
	}
	return newTestProxy(t, up, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = sessionRoutes
		if mod != nil {
			mod(o)
		}
		o.Stages.Sessions = q
	})
}

// wantWaiting reports, as an error, the number of requests waiting for a
// session turn unless it is n.
func wantWaiting(m *sessionCounters, n int64) error {
	if got := m.waiting.Load(); got != n {
		return fmt.Errorf("waiting = %d", got)
	}
	return nil
}

// sessionClient is an HTTP client with room for many connections.
func sessionClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConns: 2000, MaxIdleConnsPerHost: 1000, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 60 * time.Second}
}

// send makes one request and reads its answer whole.
func send(ctx context.Context, c *http.Client, method, u, key string, hdr ...string) (result, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(`{"n":1}`))
	if err != nil {
		return result{}, err
	}
	if method == "GET" {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if strings.EqualFold(hdr[i], "Host") {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		return result{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return result{res.StatusCode, res.Header, b}, err
}

// async sends a request in the background; the answer arrives on the
// returned channel.
func async(c *http.Client, method, u, key string, hdr ...string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		r, err := send(context.Background(), c, method, u, key, hdr...)
		if err != nil {
			r = result{status: -1, body: []byte(err.Error())}
		}
		ch <- r
	}()
	return ch
}

func recv(t *testing.T, ch <-chan result, what string) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: no answer within 20s", what)
		return result{}
	}
}

// released reports whether key (as sent by send: no identity header, no
// tenant) is free to run again: no record (the memory store deletes a
// released one) or a released tombstone.
func released(t *testing.T, tp *testProxy, key string) bool {
	t.Helper()
	req := httptest.NewRequest("PUT", "/carts/x", nil)
	rec, err := tp.store.Get(t.Context(), tp.p.scope(req, key))
	if errors.Is(err, keystore.ErrNotFound) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return rec.State == keystore.StateReleased
}

// TestSessionOverflow is issue 4's exact overflow: the running request
// held at the upstream, requests 2–5 wait, the 6th gets 503 session_busy
// with Retry-After: 1 and its key is released (the same request later
// runs); the waiters then run in arrival order; a duplicate of a waiting
// request gets 409 in progress, not a place in the line.
func TestSessionOverflow(t *testing.T) {
	t.Parallel()
	up := newSessionUpstream(t)
	m := &sessionCounters{}
	tp := newSessionProxy(t, up.URL, session.Options{QueueDepth: 4, QueueTimeout: time.Minute, Metrics: m}, nil)
	defer up.Open()
	c := sessionClient(t)
	u := tp.URL + "/carts/c1"

	answers := []<-chan result{async(c, "PUT", u, "k1", "X-Hold", "1")}
	up.Arrival(t, "k1")
	for i := 2; i <= 5; i++ {
		answers = append(answers, async(c, "PUT", u, fmt.Sprintf("k%d", i)))
		itestutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d waiting", i-1), func() error { return wantWaiting(m, int64(i-1)) })
	}

	r := recv(t, async(c, "PUT", u, "k6"), "6th")
	if r.status != 503 || problemCode(t, r) != "session_busy" || r.header.Get("Retry-After") != "1" {
		t.Fatalf("6th = %v, Retry-After %q; want 503 session_busy, Retry-After 1", r, r.header.Get("Retry-After"))
	}
	// The key is released as the stage returns, just after the answer.
	itestutil.Eventually(t, 10*time.Second, "the 6th key released (it never ran)", func() bool { return released(t, tp, "k6") })
	r = recv(t, async(c, "PUT", u, "k3"), "duplicate of a waiter")
	if r.status != 409 || problemCode(t, r) != "idempotency_in_progress" || r.header.Get("Retry-After") != "2" {
		t.Errorf("duplicate of waiting k3 = %v; want 409 idempotency_in_progress, Retry-After 2", r)
	}
	if n := m.waiting.Load(); n != 4 {
		t.Errorf("waiting after the refusals = %d; want 4", n)
	}

	up.Open()
	for i, ch := range answers {
		if r := recv(t, ch, fmt.Sprintf("k%d", i+1)); r.status != 201 {
			t.Errorf("k%d = %v; want 201", i+1, r)
		}
	}
	order := up.Order()
	if got := strings.Join(order, ","); got != "k1,k2,k3,k4,k5" {
		t.Errorf("upstream order = %s; want k1,k2,k3,k4,k5 (FIFO)", got)
	}
	// The refused request was never claimed for good: it runs now.
	r = recv(t, async(c, "PUT", u, "k6"), "6th again")
	if r.status != 201 || r.header.Get("Idempotent-Replayed") != "" || up.Count("k6") != 1 {
		t.Errorf("6th again = %v, executions %d; want a first execution", r, up.Count("k6"))
	}
	maxes, _ := up.Concurrency()
	if maxes["/carts/c1"] != 1 {
		t.Errorf("max concurrency of /carts/c1 = %d; want 1", maxes["/carts/c1"])
	}
	if m.full.Load() != 1 || m.waiting.Load() != 0 {
		t.Errorf("rejected full = %d, waiting = %d; want 1, 0", m.full.Load(), m.waiting.Load())
	}
}

// TestSessionQueueTimeout: a wait over queue_timeout gets 503 session_busy
// and releases the key at once, while the running request still runs.
func TestSessionQueueTimeout(t *testing.T) {
	t.Parallel()
	up := newSessionUpstream(t)
	m := &sessionCounters{}
	const timeout = 300 * time.Millisecond
	tp := newSessionProxy(t, up.URL, session.Options{QueueDepth: 4, QueueTimeout: timeout, Metrics: m}, nil)
	defer up.Open()
	c := sessionClient(t)
	u := tp.URL + "/carts/c1"

	first := async(c, "PUT", u, "k1", "X-Hold", "1")
	up.Arrival(t, "k1")
	for attempt := 1; attempt <= 2; attempt++ {
		start := time.Now()
		r := recv(t, async(c, "PUT", u, "k2"), "k2")
		d := time.Since(start)
		// The second attempt gets session_busy again, not 409 in
		// progress: the first one's claim was released.
		if r.status != 503 || problemCode(t, r) != "session_busy" || r.header.Get("Retry-After") != "1" {
			t.Fatalf("attempt %d = %v; want 503 session_busy, Retry-After 1", attempt, r)
		}
		if d < timeout {
			t.Errorf("attempt %d answered after %v; want at least the queue timeout %v", attempt, d, timeout)
		}
		t.Logf("attempt %d: 503 after %v (queue_timeout %v)", attempt, d, timeout)
		itestutil.Eventually(t, 10*time.Second, "k2 released", func() bool { return released(t, tp, "k2") })
	}
	up.Open()
	if r := recv(t, first, "k1"); r.status != 201 {
		t.Errorf("k1 = %v; want 201", r)
	}
	if r := recv(t, async(c, "PUT", u, "k2"), "k2 later"); r.status != 201 || up.Count("k2") != 1 {
		t.Errorf("k2 later = %v, executions %d; want 201, 1", r, up.Count("k2"))
	}
	if n := m.timeouts.Load(); n != 2 {
		t.Errorf("timeouts = %d; want 2", n)
	}
}

// TestSessionClientHangUp: a waiter whose client hangs up leaves the line
// (making room for another) and its key is released; it is logged as 499
// with outcome session_busy.
func TestSessionClientHangUp(t *testing.T) {
	t.Parallel()
	up := newSessionUpstream(t)
	m := &sessionCounters{}
	tp := newSessionProxy(t, up.URL, session.Options{QueueDepth: 1, QueueTimeout: time.Minute, Metrics: m}, nil)
	defer up.Open()
	c := sessionClient(t)
	u := tp.URL + "/carts/c1"

	first := async(c, "PUT", u, "k1", "X-Hold", "1")
	up.Arrival(t, "k1")
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := send(ctx, c, "PUT", u, "k2")
		gone <- err
	}()
	itestutil.Eventually(t, 10*time.Second, "1 waiting", func() error { return wantWaiting(m, 1) })
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("hung-up request = %v; want context.Canceled", err)
	}
	itestutil.Eventually(t, 10*time.Second, "none waiting, one canceled, k2 released", func() error {
		if w, c, r := m.waiting.Load(), m.canceled.Load(), released(t, tp, "k2"); w != 0 || c != 1 || !r {
			return fmt.Errorf("waiting = %d, canceled = %d, k2 released %v", w, c, r)
		}
		return nil
	})
	// The line has room again.
	third := async(c, "PUT", u, "k3")
	itestutil.Eventually(t, 10*time.Second, "1 waiting", func() error { return wantWaiting(m, 1) })
	up.Open()
	for _, x := range []struct {
		key string
		ch  <-chan result
	}{{"k1", first}, {"k3", third}} {
		if r := recv(t, x.ch, x.key); r.status != 201 {
			t.Errorf("%s = %v; want 201", x.key, r)
		}
	}
	if n := up.Count("k2"); n != 0 {
		t.Errorf("the hung-up request ran %d times; want 0", n)
	}
	if r := recv(t, async(c, "PUT", u, "k2"), "k2 again"); r.status != 201 {
		t.Errorf("k2 again = %v; want 201 (its key was released)", r)
	}
	itestutil.Eventually(t, 10*time.Second, "a 499 session_busy line in the access log", func() error {
		logs := tp.logs.String()
		for _, line := range strings.Split(logs, "\n") {
			if strings.Contains(line, `"status":499`) && strings.Contains(line, `"outcome":"session_busy"`) {
				return nil
			}
		}
		return fmt.Errorf("the log:\n%s", logs)
	})
}

// TestSessionScopes: who shares a line. A held PUT /carts/A makes a GET of
// the same cart wait; other ids, other resources, other tenants, a header
// session and a request without the session header run at once.
func TestSessionScopes(t *testing.T) {
	t.Parallel()
	up := newSessionUpstream(t)
	m := &sessionCounters{}
	tp := newSessionProxy(t, up.URL, session.Options{QueueDepth: 4, QueueTimeout: time.Minute, Metrics: m}, func(o *Options) {
		o.Idempotency.TenantFor = tenantHosts(map[string]string{"127.0.0.1": "shop1", "shop2.example": "shop2"})
	})
	defer up.Open()
	c := sessionClient(t)

	held := async(c, "PUT", tp.URL+"/carts/A", "held", "X-Hold", "1")
	up.Arrival(t, "held")
	hdrHeld := async(c, "POST", tp.URL+"/checkout", "hdr-held", "X-Cart-Id", "A", "X-Hold", "1")
	up.Arrival(t, "hdr-held")

	get := async(c, "GET", tp.URL+"/carts/A", "")
	itestutil.Eventually(t, 10*time.Second, "1 waiting: the GET", func() error { return wantWaiting(m, 1) })

	for _, tt := range []struct {
		name, method, path, key string
		hdr                     []string
	}{
		{"other id", "PUT", "/carts/B", "b", nil},
		{"id case kept", "PUT", "/carts/a", "lower", nil},
		{"other resource, same id", "PUT", "/orders/A", "order", nil},
		{"other path before the id", "POST", "/shops/s1/carts/A/items", "item", nil},
		{"other tenant", "PUT", "/carts/A", "tenant2", []string{"Host", "shop2.example"}},
		{"other header value", "POST", "/checkout", "hdr-b", []string{"X-Cart-Id", "B"}},
		{"no session header", "POST", "/checkout", "hdr-none", nil},
	} {
		r, err := send(context.Background(), c, tt.method, tp.URL+tt.path, tt.key, tt.hdr...)
		if err != nil || r.status != 201 {
			t.Errorf("%s: %s %s = %v, %v; want 201 at once while /carts/A is held", tt.name, tt.method, tt.path, r, err)
		}
	}
	if n := m.waiting.Load(); n != 1 {
		t.Errorf("waiting = %d; want 1", n)
	}
	// The same header session waits.
	hdrWait := async(c, "POST", tp.URL+"/checkout", "hdr-wait", "X-Cart-Id", "A")
	itestutil.Eventually(t, 10*time.Second, "2 waiting", func() error { return wantWaiting(m, 2) })
	// Another spelling of the same cart is the same session: it waits.
	spelled := async(c, "PUT", tp.URL+"/CARTS//%41/", "spelled")
	itestutil.Eventually(t, 10*time.Second, "3 waiting", func() error { return wantWaiting(m, 3) })
	up.Open()
	for name, ch := range map[string]<-chan result{"held": held, "get": get, "hdr-held": hdrHeld, "hdr-wait": hdrWait, "spelled": spelled} {
		if r := recv(t, ch, name); r.status != 201 {
			t.Errorf("%s = %v; want 201", name, r)
		}
	}
}

// loadSessions sends per requests to each of sessions sessions, all at
// once, spread over bases, each taking work at the upstream. It checks
// that the upstream never ran two of one session at once and that every
// request ran once, and reports the wall time and peak parallelism.
func loadSessions(t *testing.T, up *itestutil.HeldUpstream, bases []string, sessions, per int, work time.Duration) {
	t.Helper()
	c := sessionClient(t)
	var wg sync.WaitGroup
	var failed atomic.Int64
	start := time.Now()
	for s := range sessions {
		for i := range per {
			wg.Go(func() {
				base := bases[(s+i)%len(bases)]
				key := fmt.Sprintf("s%d-r%d", s, i)
				r, err := send(context.Background(), c, "PUT", fmt.Sprintf("%s/carts/sess-%d", base, s), key, "X-Work", work.String())
				if err != nil || r.status != 201 {
					if failed.Add(1) <= 5 {
						t.Errorf("%s = %v, %v; want 201", key, r, err)
					}
				}
			})
		}
	}
	wg.Wait()
	wall := time.Since(start)
	maxes, peak := up.Concurrency()
	order := up.Order()
	for s := range sessions {
		p := fmt.Sprintf("/carts/sess-%d", s)
		if maxes[p] != 1 {
			t.Errorf("%s: the upstream ran %d at once; want 1", p, maxes[p])
		}
	}
	if len(order) != sessions*per {
		t.Errorf("upstream ran %d requests; want %d", len(order), sessions*per)
	}
	for _, k := range order {
		if n := up.Count(k); n != 1 {
			t.Errorf("%s ran %d times; want 1", k, n)
		}
	}
	// Parallelism: the upstream's total busy time over the wall time.
	serial := time.Duration(sessions*per) * work
	t.Logf("%d requests (%d sessions × %d at once, %d proxies, %v of upstream work each): wall %v, so %.1f sessions ran at a time on average (one line: ≥ %v); peak upstream concurrency %d",
		sessions*per, sessions, per, len(bases), work, wall.Round(time.Millisecond), float64(serial)/float64(wall), serial, peak)
	if peak < 2 {
		t.Errorf("peak upstream concurrency = %d; want different sessions to run in parallel", peak)
	}
}

// TestSessionLoad is issue 4's proof in one process: 50 concurrent
// requests to each of 20 sessions; the upstream sees at most one request
// per session at a time, and sessions run in parallel.
func TestSessionLoad(t *testing.T) {
	t.Parallel()
	up := newSessionUpstream(t)
	tp := newSessionProxy(t, up.URL, session.Options{QueueDepth: 64, QueueTimeout: time.Minute}, nil)
	loadSessions(t, up, []string{tp.URL}, 20, 50, 20*time.Millisecond)
}

// newRedisSessionProxy is one replica: its own Redis clients, the Redis
// key store and the Redis session lock under prefix.
//
// The clients get a 5 s timeout: 1,000 requests at once on a small, busy
// machine under -race would otherwise hit the default 500 ms, which tests
// the machine, not the turns.
func newRedisSessionProxy(t *testing.T, up, addr, prefix string, depth int, m session.Metrics) string {
	t.Helper()
	copts := redisstore.ClientOptions{Addrs: []string{addr}, Timeout: 5 * time.Second}
	sc, err := redisstore.NewClient(copts)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := redisstore.NewClient(copts)
	if err != nil {
		t.Fatal(err)
	}
	st, err := redisstore.New(sc, redisstore.Options{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	locker, err := redislock.New(lc, redislock.Options{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	q, err := session.New(session.Options{QueueDepth: depth, QueueTimeout: time.Minute, Locker: locker, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(up)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{
		Upstream: u,
		Stages:   Stages{Routes: sessionRoutes},
		Store:    st,
		Idempotency: Idempotency{
			IdentityHeaders: []string{"Authorization"},
			ReplayHeader:    "Idempotent-Replayed",
			ReleaseStatuses: []int{400, 409, 503},
		},
	}
	opts.Stages.Sessions = q
	p, err := newOpts(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() {
		srv.Close()
		p.Close()
		p.deps.Transport.(*http.Transport).CloseIdleConnections()
		locker.Close()
		st.Close()
		lc.Close()
		sc.Close()
	})
	return srv.URL
}

// TestSessionLoadTwoReplicas is the same proof with two proxies sharing
// one real Redis (key store and session lock); requests of each session
// alternate between them. No Redis key name holds a raw session id.
func TestSessionLoadTwoReplicas(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	prefix := fmt.Sprintf("idemgate-test:%s:%d:%d:", t.Name(), os.Getpid(), time.Now().UnixNano())
	up := newSessionUpstream(t)
	m := &sessionCounters{}
	a := newRedisSessionProxy(t, up.URL, addr, prefix, 64, m)
	b := newRedisSessionProxy(t, up.URL, addr, prefix, 64, m)
	loadSessions(t, up, []string{a, b}, 20, 50, 20*time.Millisecond)
	// Every turn held the Redis lock: none fell back to the local queue.
	if n := m.fallbacks.Load(); n != 0 {
		t.Errorf("fallbacks to the local queue = %d; want 0", n)
	}

	// KEYS walks the whole shared server: give it time on a loaded CI.
	c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{addr}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys, err := c.Keys(t.Context(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	sessionKeys := 0
	for _, k := range keys {
		if strings.Contains(k, "sess-") {
			t.Errorf("Redis key %q holds a raw session id", k)
		}
		if strings.Contains(k, "session:") {
			sessionKeys++
		}
	}
	t.Logf("%d Redis keys under the prefix, %d of them session keys (fences; locks are gone)", len(keys), sessionKeys)
}

func TestPathBefore(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		path, tmpl, param, want string
	}{
		{"/carts/x", "/carts/{id}", "id", "/carts/"},
		{"/x", "/{id}", "id", "/"},
		{"/shops/s1/carts/x/items", "/shops/{shop}/carts/{cart}/items", "cart", "/shops/s1/carts/"},
		{"/shops/s1/carts/x/items", "/shops/{shop}/carts/{cart}/items", "shop", "/shops/"},
		{"/a/B%2Fc/", "/a/{id}/", "id", "/a/"},
		{"/SHOPS/%73%31/Carts;v=1/x/items/", "/shops/{shop}/carts/{cart}/items", "cart", "/shops/s1/carts/"},
		{"//shops/./S1/carts/x/items", "/shops/{shop}/carts/{cart}/items", "cart", "/shops/S1/carts/"},
	} {
		tab, err := pathtmpl.NewTable([]pathtmpl.Entry{{Method: "GET", Template: pathtmpl.MustParse(tt.tmpl)}})
		if err != nil {
			t.Fatal(err)
		}
		m, ok, err := tab.Match("GET", tt.path)
		if !ok || err != nil {
			t.Fatalf("Match(%q) on %s = %v, %v", tt.path, tt.tmpl, ok, err)
		}
		if got := pathBefore(&m, tt.param); got != tt.want {
			t.Errorf("pathBefore(%q, %q, %q) = %q; want %q", tt.path, tt.tmpl, tt.param, got, tt.want)
		}
	}
}

// TestSessionTurnWithoutQueue: without a queue the stage is left out, and a
// session route serves without turns.
func TestSessionTurnWithoutQueue(t *testing.T) {
	t.Parallel()
	if (&Proxy{}).sessionTurn(nil) != nil {
		t.Error("sessionTurn(nil) = a stage; want none")
	}
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Stages.Routes = sessionRoutes })
	if r := tp.do(t, "GET", "/carts/c1", "", ""); r.status != 201 {
		t.Errorf("GET on a session route without a queue = %v; want the upstream's 201", r)
	}
}
