package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/jsonlog"
	"github.com/idemgate/idemgate/internal/problem"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
}

// fakeClock is the memory store's clock in tests.
type fakeClock = testutil.Clock

// upstream is a real loopback API that counts executions per
// method+path+key and answers with what it saw.
type upstream struct {
	*httptest.Server
	mu    sync.Mutex // protects count, last
	count map[string]int
	last  *http.Request
	total atomic.Int64
	// handler, when set, answers instead of the default echo.
	handler func(w http.ResponseWriter, r *http.Request, n int)
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{count: make(map[string]int)}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		k := r.Method + " " + r.URL.RequestURI() + " " + r.Header.Get("Idempotency-Key")
		u.mu.Lock()
		u.count[k]++
		n := int(u.total.Add(1))
		u.last = r.Clone(context.Background())
		u.mu.Unlock()
		if u.handler != nil {
			r.Body = io.NopCloser(bytes.NewReader(body))
			u.handler(w, r, n)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Execution", fmt.Sprint(n))
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"execution":%d,"body":%q}`, n, body)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) executions(method, uri, key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.count[method+" "+uri+" "+key]
}

func (u *upstream) lastRequest() *http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last
}

// testProxy is a Proxy on a memory store with a fake clock behind a real
// loopback server.
type testProxy struct {
	*httptest.Server
	p     *Proxy
	store *memstore.Store
	clock *fakeClock
	logs  *syncBuffer
}

type syncBuffer = testutil.SyncBuffer

var defaultRoutes = []Route{
	{Name: "create_cart", Method: "POST", Path: "/ucp/v1/carts", Idempotent: true},
	{Name: "update_cart", Method: "PUT", Path: "/ucp/v1/carts/{id}", Idempotent: true, FingerprintIgnore: []string{"/meta/sent_at"}},
	{Name: "strict", Method: "POST", Path: "/strict", Idempotent: true, RequireKey: true},
	{Name: "slow", Method: "POST", Path: "/slow", Idempotent: true, Timeout: time.Second},
	{Name: "get_cart", Method: "GET", Path: "/ucp/v1/carts/{id}"},
}

func newTestProxy(t *testing.T, up string, mod func(*Options, *memstore.Options)) *testProxy {
	t.Helper()
	clk := testutil.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	mopts := memstore.Options{Now: clk.Now}
	u, err := url.Parse(up)
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	opts := Options{
		Upstream: u,
		Stages:   Stages{Routes: defaultRoutes},
		Idempotency: Idempotency{
			IdentityHeaders: []string{"Authorization"},
			ReplayHeader:    "Idempotent-Replayed",
			ReleaseStatuses: []int{400, 401, 403, 404, 405, 408, 409, 413, 415, 422, 425, 429, 503},
		},
		// cmd/idemgate's handler: the access log's HandleAttrs path
		// (the other tests' slog handlers take the Record path).
		Logger: slog.New(jsonlog.New(logs, nil)),
	}
	if mod != nil {
		mod(&opts, &mopts)
	}
	st := memstore.New(mopts)
	opts.Store = st
	p, err := newOpts(opts)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(func() {
		srv.Close()
		p.Close()
		st.Close()
		if tr, ok := opts.Transport.(*http.Transport); ok {
			tr.CloseIdleConnections()
		} else if opts.Transport == nil {
			p.deps.Transport.(*http.Transport).CloseIdleConnections()
		}
	})
	return &testProxy{Server: srv, p: p, store: st, clock: clk, logs: logs}
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func (r result) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

func (tp *testProxy) do(t *testing.T, method, path, key, body string, hdr ...string) result {
	t.Helper()
	req, err := http.NewRequest(method, tp.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body = http.NoBody
		req.ContentLength = 0
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := tp.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading %s %s: %v", method, path, err)
	}
	return result{res.StatusCode, res.Header, b}
}

// problemCode returns the code of a problem document, or "".
func problemCode(t *testing.T, r result) string {
	t.Helper()
	if r.header.Get("Content-Type") != (problem.JSON{}).ContentType() {
		return ""
	}
	var p struct {
		Code      string `json:"code"`
		Status    int    `json:"status"`
		RequestID string `json:"request_id"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Status != r.status {
		t.Errorf("problem status %d; want the response's %d", p.Status, r.status)
	}
	if p.RequestID == "" || p.RequestID != r.header.Get("X-Request-Id") {
		t.Errorf("problem request_id %q; want the response's X-Request-Id %q", p.RequestID, r.header.Get("X-Request-Id"))
	}
	return p.Code
}

// tenantHosts is the tenant rule of a config with these tenant_hosts.
func tenantHosts(hosts map[string]string) func(host string) (string, bool) {
	id := &config.Idempotency{TenantHosts: hosts}
	return id.TenantFor
}

func mustPrefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}
