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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgate/idemgate/internal/modes"
	itestutil "github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/keystore/redisstore"
)

// lookupUpstream is an API with a write whose first execution per key
// breaks the connection after it ran (so its outcome is unknown), and a
// lookup of the write by cart and key that answers as mode says.
type lookupUpstream struct {
	*httptest.Server
	mu      sync.Mutex // protects writes, last
	writes  map[string]int
	last    *http.Request // the last lookup
	mode    atomic.Value  // "found", "absent", "denied", "error", "other"
	lookups atomic.Int64
	inside  atomic.Int64  // lookups running now
	most    atomic.Int64  // the most lookups ever running at once
	gate    chan struct{} // when not nil, lookups wait for it to close
	arrived chan struct{} // a lookup arrived (buffered)
}

func newLookupUpstream(t *testing.T, mode string, gated bool) *lookupUpstream {
	u := &lookupUpstream{writes: map[string]int{}, arrived: make(chan struct{}, 100)}
	u.mode.Store(mode)
	if gated {
		u.gate = make(chan struct{})
	}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			io.Copy(io.Discard, r.Body)
			u.mu.Lock()
			u.writes[r.Header.Get("Idempotency-Key")]++
			n := u.writes[r.Header.Get("Idempotency-Key")]
			u.mu.Unlock()
			if n == 1 {
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					conn.Close() // it ran; the answer is lost
				}
				return
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"run":%d}`, n)
			return
		}
		u.lookups.Add(1)
		in := u.inside.Add(1)
		defer u.inside.Add(-1)
		for m := u.most.Load(); in > m && !u.most.CompareAndSwap(m, in); m = u.most.Load() {
		}
		u.mu.Lock()
		u.last = r.Clone(context.Background())
		u.mu.Unlock()
		u.arrived <- struct{}{}
		if u.gate != nil {
			<-u.gate
		}
		switch u.mode.Load() {
		case "found":
			h := w.Header()
			h.Set("Content-Type", "application/json")
			h.Set("ETag", `"v1"`)
			h.Set("Last-Modified", "Mon, 30 Nov 2026 12:00:00 GMT")
			h.Set("Cache-Control", "max-age=60")
			h.Set("Expires", "Mon, 30 Nov 2026 12:01:00 GMT")
			h.Set("X-Order", "o-1")
			h.Set("Set-Cookie", "s=1")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, `{"order":"o-1"}`)
		case "absent":
			w.WriteHeader(http.StatusNotFound)
		case "denied":
			w.WriteHeader(http.StatusUnauthorized)
		case "other":
			w.WriteHeader(http.StatusInternalServerError)
		default: // an answer that breaks (a connection error before it would be retried by the Transport)
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "short")
		}
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *lookupUpstream) executions(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.writes[key]
}

func (u *lookupUpstream) lastLookup() *http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last
}

// reconcileEvery is the probe's every in these tests.
const reconcileEvery = 10 * time.Second

// reconcileRoutes: a hold route with a 1 s timeout, no late wait and a
// probe that replays 201.
func reconcileRoutes(every time.Duration) []Route {
	var wait time.Duration
	return []Route{{Name: "pay", Method: "POST", Path: "/carts/{cart}/pay", Idempotent: true, Timeout: time.Second,
		LateAnswerWait: &wait, UnknownOutcome: modes.UnknownHold,
		Reconcile: &Reconcile{Path: "/carts/{cart}/orders/{key}", Status: 201, Every: every}}}
}

// newReconcileProxy is a proxy on reconcileRoutes in front of up; store
// nil: a memory store on the test proxy's clock.
func newReconcileProxy(t *testing.T, up string, store keystore.Store, every time.Duration) (*testProxy, *Metrics) {
	t.Helper()
	m := NewMetrics(prometheus.NewRegistry(), "test", "")
	tp := newTestProxy(t, up, func(o *Options, mo *memstore.Options) {
		o.Now = mo.Now // the test's clock
		o.Stages.Routes = reconcileRoutes(every)
		o.Idempotency.DropHeaders = []string{"Set-Cookie"}
		o.Metrics = m
	})
	if store != nil {
		// A second proxy on store (real clock), as another replica.
		u, _ := url.Parse(up)
		routes := reconcileRoutes(every)
		// On the real clock, a timeout with room for a loaded machine:
		// the broken write must answer 502, not 504.
		routes[0].Timeout = 2500 * time.Millisecond
		opts := Options{Upstream: u, Store: store, Stages: Stages{Routes: routes}, Metrics: m,
			Idempotency: Idempotency{IdentityHeaders: []string{"Authorization"}, ReplayHeader: "Idempotent-Replayed", DropHeaders: []string{"Set-Cookie"}}}
		p, err := newOpts(opts)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(p)
		t.Cleanup(func() { srv.Close(); p.Close() })
		return &testProxy{Server: srv, p: p, clock: tp.clock, logs: tp.logs}, m
	}
	return tp, m
}

func probes(m *Metrics, result string) float64 {
	return testutil.ToFloat64(m.probes.WithLabelValues("pay", result))
}

// write sends the keyed write with an identity and a cookie.
func (tp *testProxy) write(t *testing.T, key string) result {
	t.Helper()
	return tp.do(t, "POST", "/carts/c%201/pay", key, `{"amount":1}`, "Authorization", "Bearer tok", "Cookie", "sid=abc", "Accept-Encoding", "gzip")
}

func unknownStore(tp *testProxy) keystore.UnknownStore {
	return tp.p.deps.Store.(keystore.UnknownStore)
}

// waitProbes waits until the record of key has been probed n times.
func waitProbes(t *testing.T, tp *testProxy, key string, n int) keystore.ProbeState {
	t.Helper()
	var st keystore.ProbeState
	itestutil.Eventually(t, 10*time.Second, "a reconcile probe", func() error {
		if st, _, _ = unknownStore(tp).ProbeStatus(context.Background(), tp.scopeOf(key)); st.Probes < n {
			return fmt.Errorf("probes of %s = %+v; want %d", key, st, n)
		}
		return nil
	})
	return st
}

// scopeOf returns the store key of the test's writes with key.
func (tp *testProxy) scopeOf(key string) keystore.Key {
	r := httptestRequest()
	r.Header.Set("Authorization", "Bearer tok")
	return tp.p.scope(r, key)
}

// TestReconcileFound (issue 26, Proof): a write whose connection broke is
// held; the first probe, sent at the moment of unknown with the
// original's Host, identity and cookie (no Accept-Encoding) to the path
// filled with the cart and the key, finds it: retries replay the probe's
// answer with the configured status, without validators or freshness,
// and the write ran once.
func TestReconcileFound(t *testing.T) {
	t.Parallel()
	up := newLookupUpstream(t, "found", false)
	tp, m := newReconcileProxy(t, up.URL, nil, reconcileEvery)
	if r := tp.write(t, "k.1"); r.status != http.StatusBadGateway {
		t.Fatalf("first = %v; want 502", r)
	}
	st := waitProbes(t, tp, "k.1", 1)
	if !st.Resolved || st.Last != keystore.ProbeFound {
		t.Errorf("probe state = %+v; want resolved by a found probe", st)
	}
	lk := up.lastLookup()
	host := tp.Listener.Addr().String()
	if lk.RequestURI != "/carts/c%201/orders/k%2E1" || lk.Method != http.MethodGet || lk.Host != host ||
		lk.Header.Get("Authorization") != "Bearer tok" || lk.Header.Get("Cookie") != "sid=abc" || lk.Header.Get("Accept-Encoding") != "" {
		t.Errorf("lookup = %s %s Host %q, headers %v; want GET /carts/c%%201/orders/k%%2E1, Host %q, the identity and cookie, no Accept-Encoding",
			lk.Method, lk.RequestURI, lk.Host, lk.Header, host)
	}
	r := tp.write(t, "k.1")
	if r.status != http.StatusCreated || string(r.body) != `{"order":"o-1"}` || r.header.Get("Idempotent-Replayed") != "true" || r.header.Get("X-Order") != "o-1" {
		t.Fatalf("retry = %v %v; want the probe's answer replayed as 201", r, r.header)
	}
	for _, h := range []string{"Etag", "Last-Modified", "Cache-Control", "Expires", "Set-Cookie"} {
		if v := r.header.Get(h); v != "" {
			t.Errorf("replay carries %s: %q; want none", h, v)
		}
	}
	if n := up.executions("k.1"); n != 1 {
		t.Errorf("executions = %d; want 1", n)
	}
	if n := probes(m, keystore.ProbeFound); n != 1 {
		t.Errorf("probes{found} = %v; want 1", n)
	}
	rec, err := tp.p.deps.Store.Get(context.Background(), tp.scopeOf("k.1"))
	if err != nil || rec.State != keystore.StateCompleted || rec.Info != nil {
		t.Errorf("record = %v, info %v, %v; want completed, the probe's headers gone", rec.State, rec.Info, err)
	}
}

// TestReconcileAbsent (issue 26, Proof): absent answers release the key
// only after the write's timeout + late_answer_wait, and when two of them
// at least `every` apart agree; the next retry then runs once. Before
// that the record stays unknown; a probe lease keeps every prober out for
// `every` after each probe (injected clock).
func TestReconcileAbsent(t *testing.T) {
	t.Parallel()
	up := newLookupUpstream(t, "absent", false)
	tp, m := newReconcileProxy(t, up.URL, nil, reconcileEvery)
	ctx := context.Background()
	tp.write(t, "k1")
	// The first probe, at the moment of unknown: the write might still be
	// running (timeout 1s), so its absent proves nothing.
	if st := waitProbes(t, tp, "k1", 1); !st.AbsentSince.IsZero() || st.Resolved {
		t.Errorf("probe state after an early absent = %+v; want no run of absents", st)
	}
	wantUnknown(t, "retry after an early absent", tp.write(t, "k1"))
	// Within every: the lease keeps the loop out.
	tp.clock.Advance(reconcileEvery / 2)
	if n, err := tp.p.ReconcileUnknown(ctx, 100); err != nil || up.lookups.Load() != 1 {
		t.Fatalf("ReconcileUnknown within every = %d, %v, lookups %d; want none sent", n, err, up.lookups.Load())
	}
	tp.clock.Advance(reconcileEvery / 2)
	tp.p.ReconcileUnknown(ctx, 100)
	if st, _, _ := unknownStore(tp).ProbeStatus(ctx, tp.scopeOf("k1")); st.Probes != 2 || st.AbsentSince.IsZero() || st.Resolved {
		t.Fatalf("after the first absent that counts: state %+v; want a run of absents begun", st)
	}
	wantUnknown(t, "retry after one absent", tp.write(t, "k1"))
	tp.clock.Advance(reconcileEvery)
	tp.p.ReconcileUnknown(ctx, 100)
	if st, _, _ := unknownStore(tp).ProbeStatus(ctx, tp.scopeOf("k1")); st.Probes != 3 || !st.Resolved || st.Last != keystore.ProbeReleased {
		t.Fatalf("after two absents every apart: state %+v; want released", st)
	}
	if r := tp.write(t, "k1"); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry after the release = %v; want it run", r)
	}
	if r := tp.write(t, "k1"); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry after the run = %v; want its replay", r)
	}
	if n := up.executions("k1"); n != 2 {
		t.Errorf("executions = %d; want 2 (the original, then the retry after the release, once)", n)
	}
	if a, rel := probes(m, keystore.ProbeAbsent), probes(m, keystore.ProbeReleased); a != 2 || rel != 1 {
		t.Errorf("probes{absent} = %v, {released} = %v; want 2, 1", a, rel)
	}
}

// TestReconcileStaysUnknown (issue 26, Proof): 401, 403, other statuses
// and errors leave the record unknown, are counted, and break a run of
// absent answers; the record is probed again every `every` (injected
// clock), never more often.
func TestReconcileStaysUnknown(t *testing.T) {
	t.Parallel()
	up := newLookupUpstream(t, "denied", false)
	tp, m := newReconcileProxy(t, up.URL, nil, reconcileEvery)
	ctx := context.Background()
	tp.write(t, "k1")
	waitProbes(t, tp, "k1", 1)
	steps := []struct {
		mode, result string
		advance      time.Duration
		probes       int64
	}{
		{"error", keystore.ProbeError, reconcileEvery - time.Second, 1}, // not yet
		{"error", keystore.ProbeError, time.Second, 2},
		{"absent", keystore.ProbeAbsent, reconcileEvery, 3},
		{"other", keystore.ProbeOther, reconcileEvery, 4},
		{"absent", keystore.ProbeAbsent, reconcileEvery, 5}, // a new run: one absent only
		{"denied", keystore.ProbeDenied, reconcileEvery, 6},
	}
	for i, s := range steps {
		up.mode.Store(s.mode)
		tp.clock.Advance(s.advance)
		if _, err := tp.p.ReconcileUnknown(ctx, 100); err != nil {
			t.Fatal(err)
		}
		if n := up.lookups.Load(); n != s.probes {
			t.Fatalf("step %d: lookups = %d; want %d", i, n, s.probes)
		}
		wantUnknown(t, fmt.Sprintf("retry at step %d", i), tp.write(t, "k1"))
	}
	for _, c := range []struct {
		result string
		want   float64
	}{{keystore.ProbeDenied, 2}, {keystore.ProbeError, 1}, {keystore.ProbeOther, 1}, {keystore.ProbeAbsent, 2}, {keystore.ProbeReleased, 0}} {
		if n := probes(m, c.result); n != c.want {
			t.Errorf("probes{%s} = %v; want %v", c.result, n, c.want)
		}
	}
	if n := up.executions("k1"); n != 1 {
		t.Errorf("executions = %d; want 1", n)
	}
}

// TestReconcileFirstResolutionWins (issue 26, Proof): an operator's
// complete lands while a probe is out; the probe's found answer is then
// rejected (counted lost) and retries replay the operator's answer.
func TestReconcileFirstResolutionWins(t *testing.T) {
	t.Parallel()
	up := newLookupUpstream(t, "found", true)
	tp, m := newReconcileProxy(t, up.URL, nil, reconcileEvery)
	tp.write(t, "k1")
	<-up.arrived // the first probe is out, held by the upstream
	sk := tp.scopeOf("k1")
	rec, err := tp.p.deps.Store.Get(context.Background(), sk)
	if err != nil || rec.State != keystore.StateUnknown {
		t.Fatalf("record = %+v, %v; want unknown", rec, err)
	}
	if err := unknownStore(tp).Resolve(context.Background(), sk, rec.ClaimID, &keystore.Response{Status: 202, Body: []byte("operator")}); err != nil {
		t.Fatalf("admin complete: %v", err)
	}
	close(up.gate)
	itestutil.Eventually(t, 10*time.Second, "a reconcile probe", func() error {
		if probes(m, keystore.ProbeLost) != 1 {
			return errors.New("the probe's result was never counted")
		}
		return nil
	})
	if r := tp.write(t, "k1"); r.status != 202 || string(r.body) != "operator" {
		t.Errorf("retry = %v; want the operator's answer", r)
	}
	if n := probes(m, keystore.ProbeFound); n != 0 {
		t.Errorf("probes{found} = %v; want 0", n)
	}
}

// TestReconcileOneProberAtATime (issue 26, Proof): replicas sharing a
// store (two proxies, each with its own loop) probe one unknown record
// one at a time: of many racing rounds, one probe runs, on the memory
// store and on Redis.
func TestReconcileOneProberAtATime(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) keystore.Store{
		"memory": func(t *testing.T) keystore.Store {
			s := memstore.New(memstore.Options{})
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
	if addr := os.Getenv("IDEMGATE_TEST_REDIS_ADDR"); addr != "" {
		stores["redis"] = func(t *testing.T) keystore.Store {
			c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{addr}, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			s, err := redisstore.New(c, redisstore.Options{KeyPrefix: fmt.Sprintf("reconcile-%d:", time.Now().UnixNano())})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			up := newLookupUpstream(t, "error", true)
			st := newStore(t)
			a, _ := newReconcileProxy(t, up.URL, st, time.Second)
			b, _ := newReconcileProxy(t, up.URL, st, time.Second)
			a.write(t, "k1")
			<-up.arrived // A's first probe is out
			var wg sync.WaitGroup
			for _, p := range []*Proxy{a.p, b.p, a.p, b.p, a.p, b.p} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.ReconcileUnknown(context.Background(), 100)
				}()
			}
			wg.Wait() // every round found the record's lease taken
			close(up.gate)
			if n, most := up.lookups.Load(), up.most.Load(); n != 1 || most != 1 {
				t.Errorf("lookups = %d, at once at most %d; want 1, 1", n, most)
			}
			// After every, the next round probes again: one more.
			itestutil.Eventually(t, 10*time.Second, "a reconcile probe", func() error {
				a.p.ReconcileUnknown(context.Background(), 100)
				b.p.ReconcileUnknown(context.Background(), 100)
				if n := up.lookups.Load(); n < 2 {
					return fmt.Errorf("lookups = %d; want 2", n)
				}
				return nil
			})
			if most := up.most.Load(); most != 1 {
				t.Errorf("at once at most %d lookups; want 1", most)
			}
			if n := up.executions("k1"); n != 1 {
				t.Errorf("executions = %d; want 1", n)
			}
		})
	}
}

// TestReconcileRedis (issue 26, Proof, on real Redis): two replicas on one
// Redis. A write through A breaks; A's first probe finds it and a retry
// through B replays the probe's answer. Another write's probes answer
// absent: the early one (the write may still run) does not count; B's
// loop releases the key after two absents `every` apart, and the next
// retry runs once.
func TestReconcileRedis(t *testing.T) {
	t.Parallel()
	addr := os.Getenv("IDEMGATE_TEST_REDIS_ADDR")
	if addr == "" {
		t.Skip("IDEMGATE_TEST_REDIS_ADDR is not set")
	}
	c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{addr}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	st, err := redisstore.New(c, redisstore.Options{KeyPrefix: fmt.Sprintf("reconcile-redis-%d:", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	up := newLookupUpstream(t, "found", false)
	a, m := newReconcileProxy(t, up.URL, st, time.Second)
	b, mb := newReconcileProxy(t, up.URL, st, time.Second)
	if r := a.write(t, "k.found"); r.status != http.StatusBadGateway {
		t.Fatalf("first through A = %v; want 502", r)
	}
	itestutil.Eventually(t, 10*time.Second, "a reconcile probe", func() error {
		if probes(m, keystore.ProbeFound) != 1 {
			return errors.New("A's probe never found the write")
		}
		return nil
	})
	if r := b.write(t, "k.found"); r.status != http.StatusCreated || string(r.body) != `{"order":"o-1"}` || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry through B = %v; want the probe's answer replayed as 201", r)
	}
	up.mode.Store("absent")
	a.write(t, "k.absent")
	itestutil.Eventually(t, 10*time.Second, "a reconcile probe", func() error {
		if probes(m, keystore.ProbeAbsent) < 1 {
			return errors.New("A's first probe never went out")
		}
		return nil
	})
	wantUnknown(t, "retry through B after an early absent", b.write(t, "k.absent"))
	itestutil.Eventually(t, 10*time.Second, "a reconcile probe", func() error {
		b.p.ReconcileUnknown(context.Background(), 100)
		if probes(mb, keystore.ProbeReleased) != 1 {
			ps, ok, err := st.ProbeStatus(context.Background(), b.scopeOf("k.absent"))
			return fmt.Errorf("not released; %d lookups; probe state %+v %v %v", up.lookups.Load(), ps, ok, err)
		}
		return nil
	})
	if absents := probes(m, keystore.ProbeAbsent) + probes(mb, keystore.ProbeAbsent); absents < 2 {
		t.Errorf("probes{absent} = %v before the release; want at least 2 (the early one and the first that counts)", absents)
	}
	if r := b.write(t, "k.absent"); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry through B after the release = %v; want it run", r)
	}
	if n := up.executions("k.absent"); n != 2 {
		t.Errorf("executions of k.absent = %d; want 2 (the original, then the retry after the release, once)", n)
	}
	if n := up.executions("k.found"); n != 1 {
		t.Errorf("executions of k.found = %d; want 1", n)
	}
}

// applyOnAcquire is a memory store whose next AcquireProbe first runs
// apply: a reload that lands while a probe is under way.
type applyOnAcquire struct {
	*memstore.Store
	apply atomic.Pointer[func()]
}

func (s *applyOnAcquire) AcquireProbe(ctx context.Context, k keystore.Key, ttl time.Duration) (keystore.ProbeLease, bool, error) {
	if f := s.apply.Swap(nil); f != nil {
		(*f)()
	}
	return s.Store.AcquireProbe(ctx, k, ttl)
}

// TestReconcileOnePolicyPerProbe: a probe runs on the policy its route
// came from: a reload that lands between its start and its lookup (here:
// at its probe lease) moves the upstream, and the lookup still goes to
// the upstream of the route it probes for; the next pass uses the new
// policy.
func TestReconcileOnePolicyPerProbe(t *testing.T) {
	t.Parallel()
	old := newLookupUpstream(t, "other", false) // the write breaks; lookups leave it unknown
	moved := newLookupUpstream(t, "other", false)
	clk := itestutil.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	st := &applyOnAcquire{Store: memstore.New(memstore.Options{Now: clk.Now})}
	t.Cleanup(func() { st.Close() })
	u, _ := url.Parse(old.URL)
	opts := Options{Upstream: u, Store: st, Now: clk.Now, Stages: Stages{Routes: reconcileRoutes(reconcileEvery)},
		Idempotency: Idempotency{IdentityHeaders: []string{"Authorization"}}}
	p, err := newOpts(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() { srv.Close(); p.Close() })
	tp := &testProxy{Server: srv, p: p, clock: clk}
	if r := tp.write(t, "k1"); r.status != http.StatusBadGateway {
		t.Fatalf("write = %v; want 502", r)
	}
	waitProbes(t, tp, "k1", 1) // the first probe, at the moment of unknown

	mu, _ := url.Parse(moved.URL)
	opts.Upstream = mu
	reload := func() {
		if err := p.Apply(policyOf(opts)); err != nil {
			t.Error(err)
		}
	}
	st.apply.Store(&reload)
	clk.Advance(reconcileEvery)
	if n, err := p.ReconcileUnknown(context.Background(), 100); n != 1 || err != nil {
		t.Fatalf("ReconcileUnknown = %d, %v; want 1 probe", n, err)
	}
	if st.apply.Load() != nil {
		t.Fatal("the reload did not run during the probe")
	}
	if o, m := old.lookups.Load(), moved.lookups.Load(); o != 2 || m != 0 {
		t.Errorf("lookups: the probe's policy's upstream %d, the reloaded one's %d; want 2, 0", o, m)
	}
	clk.Advance(reconcileEvery)
	p.ReconcileUnknown(context.Background(), 100)
	if o, m := old.lookups.Load(), moved.lookups.Load(); o != 2 || m != 1 {
		t.Errorf("lookups after the next pass: old upstream %d, reloaded %d; want 2, 1", o, m)
	}
}
