package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	itestutil "github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// slowBody opens a connection to tp, sends a keyed POST's headers
// announcing length bytes and then only the first byte of the body, and
// returns the connection (closed when the test ends).
func slowBody(t *testing.T, tp *testProxy, key string, length int, hdr ...string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", tp.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	extra := ""
	for i := 0; i+1 < len(hdr); i += 2 {
		extra += hdr[i] + ": " + hdr[i+1] + "\r\n"
	}
	fmt.Fprintf(c, "POST /ucp/v1/carts HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n[", key, length, extra)
	return c
}

// waitHeld waits until the proxy's budget holds want bytes in total.
func waitHeld(t *testing.T, tp *testProxy, want int64) {
	t.Helper()
	itestutil.Eventually(t, 5*time.Second, fmt.Sprintf("the budget to hold %d bytes", want), func() error {
		if got := tp.p.budget.Used(); got != want {
			return fmt.Errorf("it holds %d", got)
		}
		return nil
	})
}

// A body that does not arrive within request_body_timeout gets 408
// request_timeout and the connection is closed; nothing was claimed or
// forwarded, and the budget is given back.
func TestBodyTimeout(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.RequestBodyTimeout = 300 * time.Millisecond })
	for _, length := range []int{1000, 1 << 20} { // under and over net/http's post-handler discard
		c := slowBody(t, tp, "slow", length)
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("length %d: reading the answer: %v", length, err)
		}
		res.Body.Close()
		took := time.Since(start)
		if res.StatusCode != http.StatusRequestTimeout || !res.Close {
			t.Errorf("length %d: slow body = %d (close %v); want 408 with Connection: close", length, res.StatusCode, res.Close)
		}
		if took < 250*time.Millisecond || took > 5*time.Second {
			t.Errorf("length %d: answered after %v; want about request_body_timeout (300ms)", length, took)
		}
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Errorf("length %d: connection still open after 408 (read %d bytes)", length, n)
		}
	}
	waitHeld(t, tp, 0)
	if r := tp.do(t, "POST", "/ucp/v1/carts", "slow", `{"a":1}`); r.status != 201 {
		t.Errorf("same key after the timeout = %v; want 201 (nothing was claimed)", r)
	}
	if n := up.executions("POST", "/ucp/v1/carts", "slow"); n != 1 {
		t.Errorf("upstream ran the key %d times; want 1", n)
	}
	if !strings.Contains(tp.logs.String(), `"outcome":"request_timeout"`) {
		t.Errorf("access log lacks outcome request_timeout:\n%s", tp.logs.String())
	}
}

// Stages.RequestBodyTimeout replaces the Options' on a reload.
func TestBodyTimeoutReloaded(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.RequestBodyTimeout = time.Hour })
	st := tp.p.Policy()
	st.RequestBodyTimeout = 300 * time.Millisecond
	if err := tp.p.Apply(st); err != nil {
		t.Fatal(err)
	}
	c := slowBody(t, tp, "slow-reloaded", 1000)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer: %v (still the hour of the Options?)", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout {
		t.Errorf("slow body = %d; want 408 after the reloaded 300ms", res.StatusCode)
	}
}

// One client holds at most its share of max_buffered_bytes; others go on.
func TestBudgetPerClient(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.MaxBufferedBytes, o.MaxBufferedBytesPerClient = 1<<20, 20000
		o.TrustedProxies = mustPrefixes("127.0.0.0/8")
		o.RequestBodyTimeout = time.Minute
	})
	// Client A's stalled body holds its first buffer (16 KiB), not the
	// 20000 bytes it announced.
	slow := slowBody(t, tp, "a-slow", 20000, "X-Forwarded-For", "192.0.2.1")
	waitHeld(t, tp, 16<<10)
	body := `"` + strings.Repeat("x", 9998) + `"`
	r := tp.do(t, "POST", "/ucp/v1/carts", "a-2", body, "X-Forwarded-For", "192.0.2.1")
	if r.status != 503 || problemCode(t, r) != "overloaded" {
		t.Errorf("client A's second body = %v; want 503 overloaded (its share is 20000 bytes)", r)
	}
	if r := tp.do(t, "POST", "/ucp/v1/carts", "b-1", body, "X-Forwarded-For", "198.51.100.7"); r.status != 201 {
		t.Errorf("client B's body = %v; want 201", r)
	}
	slow.Close()
	waitHeld(t, tp, 0)
	if r := tp.do(t, "POST", "/ucp/v1/carts", "a-3", body, "X-Forwarded-For", "192.0.2.1"); r.status != 201 {
		t.Errorf("client A's body after its slow one left = %v; want 201", r)
	}
	if !strings.Contains(tp.logs.String(), `"outcome":"overloaded"`) {
		t.Errorf("access log lacks outcome overloaded:\n%s", tp.logs.String())
	}
}

// The canonical JSON of a body is charged to the budget too.
func TestBudgetChargesCanonicalization(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	// Reading 100000 bytes peaks at 64 KiB + 100000 (the last growth);
	// holding the body and its canonical form takes 200000.
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.MaxBufferedBytes, o.MaxBufferedBytesPerClient = 170_000, 170_000
		o.Idempotency.MaxBodyBytes = 100_000
	})
	zeros := "[" + strings.Repeat("0,", 49_998) + "0 ]"
	if len(zeros) != 100_000 {
		t.Fatalf("body is %d bytes", len(zeros))
	}
	r := tp.do(t, "POST", "/ucp/v1/carts", "json", zeros)
	if r.status != 503 || problemCode(t, r) != "overloaded" {
		t.Errorf("JSON body whose canonical form is over the budget = %v; want 503 overloaded", r)
	}
	waitHeld(t, tp, 0)
	req, _ := http.NewRequest("POST", tp.URL+"/ucp/v1/carts", strings.NewReader(zeros))
	req.Header.Set("Idempotency-Key", "raw")
	req.Header.Set("Content-Type", "application/octet-stream")
	res, err := tp.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Errorf("same body fingerprinted raw = %d; want 201", res.StatusCode)
	}
	waitHeld(t, tp, 0)
}

// Client-address headers from an untrusted peer never reach the upstream;
// a trusted peer's are kept.
func TestClientAddrHeadersStripped(t *testing.T) {
	t.Parallel()
	hdr := []string{"X-Real-IP", "203.0.113.9", "True-Client-IP", "203.0.113.9", "Forwarded", "for=203.0.113.9",
		"X-Forwarded-Port", "444", "X-Forwarded-For", "203.0.113.9", "CF-Connecting-IP", "203.0.113.9"}
	for _, tc := range []struct {
		name    string
		trusted string
		kept    bool
	}{
		{"untrusted", "10.0.0.0/8", false},
		{"trusted", "127.0.0.0/8", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t)
			tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.TrustedProxies = mustPrefixes(tc.trusted) })
			for _, key := range []string{"", "k"} { // pass-through and keyed
				if r := tp.do(t, "POST", "/ucp/v1/carts", key, `{}`, hdr...); r.status != 201 {
					t.Fatalf("key %q: %v", key, r)
				}
				got := up.lastRequest().Header
				for _, h := range []string{"X-Real-Ip", "True-Client-Ip", "Forwarded", "X-Forwarded-Port", "Cf-Connecting-Ip"} {
					if _, ok := got[h]; ok != tc.kept {
						t.Errorf("key %q: upstream got %s = %v; want kept %v", key, h, got[h], tc.kept)
					}
				}
				wantXFF := "127.0.0.1"
				if tc.kept {
					wantXFF = "203.0.113.9, 127.0.0.1"
				}
				if xff := got.Get("X-Forwarded-For"); xff != wantXFF {
					t.Errorf("key %q: X-Forwarded-For = %q; want %q", key, xff, wantXFF)
				}
			}
		})
	}
}

// wsgiUpstream is a real loopback upstream that reads headers as WSGI and
// CGI servers do: HTTP_ + the name upper-cased with "-" as "_", so
// X_Real_IP and X-Real-IP are one variable. It records the environ of the
// last request.
type wsgiUpstream struct {
	*httptest.Server
	mu      sync.Mutex // protects environ
	environ map[string][]string
}

func newWSGIUpstream(t *testing.T) *wsgiUpstream {
	u := &wsgiUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		env := map[string][]string{}
		for k, vs := range r.Header {
			name := "HTTP_" + strings.ToUpper(strings.ReplaceAll(k, "-", "_"))
			env[name] = append(env[name], vs...)
		}
		u.mu.Lock()
		u.environ = env
		u.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *wsgiUpstream) last() map[string][]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.environ
}

// TestClientAddrHeadersFolded: behind an upstream that folds "_" into "-"
// and ignores case (WSGI, CGI), no spelling of a client-address header
// from an untrusted peer reaches it: the environ holds exactly what
// idemgate set. From a trusted peer, its own headers are kept and appended
// to as before, and only the "_" spellings (a client's, passed through) go.
func TestClientAddrHeadersFolded(t *testing.T) {
	t.Parallel()
	spoofed := []string{
		"X_Real_IP", "203.0.113.9", "x_real_ip", "203.0.113.9", "X_Forwarded_For", "203.0.113.9",
		"True_Client_IP", "203.0.113.9", "X-Forwarded_Proto", "https", "X_FORWARDED_HOST", "evil.example",
		"x-forwarded_port", "444", "X_Forwarded_Prefix", "/admin", "CF_Connecting_IP", "203.0.113.9",
		"X_Client_IP", "203.0.113.9", "fORWARDED", "for=203.0.113.9", "X-REAL-IP", "203.0.113.9",
	}
	// What the upstream may see: the client-address variables idemgate
	// sets, and nothing else of that family.
	family := func(env map[string][]string) map[string][]string {
		out := map[string][]string{}
		for k, v := range env {
			if strings.HasPrefix(k, "HTTP_X_FORWARDED_") || strings.HasSuffix(k, "_IP") || k == "HTTP_FORWARDED" {
				out[k] = v
			}
		}
		return out
	}
	for _, tc := range []struct {
		name, trusted string
		hdr           []string
		want          map[string][]string
	}{
		{"untrusted", "10.0.0.0/8", spoofed, map[string][]string{
			"HTTP_X_FORWARDED_FOR": {"127.0.0.1"}, "HTTP_X_FORWARDED_PROTO": {"http"},
		}},
		{"trusted", "127.0.0.0/8", append([]string{"X-Real-IP", "198.51.100.7", "X-Forwarded-For", "198.51.100.7"}, spoofed[:18]...), map[string][]string{
			"HTTP_X_REAL_IP": {"198.51.100.7"}, "HTTP_X_FORWARDED_FOR": {"198.51.100.7, 127.0.0.1"}, "HTTP_X_FORWARDED_PROTO": {"http"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newWSGIUpstream(t)
			tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.TrustedProxies = mustPrefixes(tc.trusted) })
			for _, key := range []string{"", "k"} { // pass-through and keyed
				if r := tp.do(t, "POST", "/ucp/v1/carts", key, `{}`, tc.hdr...); r.status != 201 {
					t.Fatalf("key %q: %v", key, r)
				}
				env := up.last()
				got := family(env)
				host := got["HTTP_X_FORWARDED_HOST"]
				delete(got, "HTTP_X_FORWARDED_HOST")
				if !maps.EqualFunc(got, tc.want, slices.Equal) {
					t.Errorf("key %q: the upstream read %q; want %q", key, got, tc.want)
				}
				if len(host) != 1 || host[0] != strings.TrimPrefix(tp.URL, "http://") {
					t.Errorf("key %q: X-Forwarded-Host %q; want the request's host only", key, host)
				}
			}
		})
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// failingComplete is a store whose CompleteClaim always fails, as an
// unreachable Redis does.
type failingComplete struct {
	*memstore.Store
	calls atomic.Int64
}

func (f *failingComplete) CompleteClaim(ctx context.Context, key keystore.Key, c keystore.Claim, resp *keystore.Response) (keystore.Completion, error) {
	f.calls.Add(1)
	return 0, errors.New("dial tcp: connection refused")
}

// Shutdown stops the background completion retries at its deadline, not
// after half the lease, and logs how many answers it could not store.
func TestShutdownStopsRetriesAtDeadline(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	u, _ := url.Parse(up.URL)
	st := &failingComplete{Store: memstore.New(memstore.Options{})}
	t.Cleanup(func() { st.Close() })
	logs := &syncBuffer{}
	p, err := newOpts(Options{
		Upstream:    u,
		Store:       st,
		Stages:      Stages{Routes: defaultRoutes},
		Idempotency: Idempotency{Lease: time.Minute}, // retries for 30s
		Logger:      slog.New(slog.NewJSONHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/ucp/v1/carts", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "k")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("keyed write = %d; want 201 (the answer goes out; storing it is retried)", res.StatusCode)
	}
	itestutil.Eventually(t, 2*time.Second, "a background retry", func() bool { return st.calls.Load() >= 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	p.Shutdown(ctx)
	if took := time.Since(start); took < 150*time.Millisecond || took > time.Second {
		t.Errorf("Shutdown took %v; want its deadline (200ms)", took)
	}
	if !strings.Contains(logs.String(), `"unstored_answers":1`) {
		t.Errorf("log lacks the count of unstored answers:\n%s", logs.String())
	}
	itestutil.Eventually(t, time.Second, "the background retries to end after the deadline", func() error {
		if n := p.renewals.tasks.Load(); n != 0 {
			return fmt.Errorf("%d still running", n)
		}
		return nil
	})
	calls := st.calls.Load()
	time.Sleep(300 * time.Millisecond)
	if st.calls.Load() != calls {
		t.Errorf("Complete still retried after the shutdown deadline")
	}
}
