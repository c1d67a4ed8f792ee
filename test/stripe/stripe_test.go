package stripe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	stripe "github.com/stripe/stripe-go/v82"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/app"
)

// mockURL is the running stripe-mock's base URL (TestMain).
var mockURL string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "stripe-mock")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "stripe-mock")
	build := exec.Command("go", "build", "-o", bin, "github.com/stripe/stripe-mock")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building stripe-mock:", err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	addr := ln.Addr().String()
	ln.Close()
	mock := exec.Command(bin, "-http-addr", addr)
	if err := mock.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "starting stripe-mock:", err)
		return 1
	}
	defer func() { mock.Process.Kill(); mock.Wait() }()
	mockURL = "http://" + addr
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "stripe-mock did not start")
			return 1
		}
	}
	return m.Run()
}

// counter sits between idemgate and stripe-mock and counts the writes that
// reach the mock, by path, account and idempotency key.
type counter struct {
	*httptest.Server
	mu sync.Mutex
	n  map[string]int
}

func newCounter(t *testing.T) *counter {
	u, _ := url.Parse(mockURL)
	c := &counter{n: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, err := time.ParseDuration(r.Header.Get("X-Delay")); err == nil {
			time.Sleep(d) // a slow write
		}
		if r.Method == http.MethodPost {
			c.mu.Lock()
			c.n[r.URL.Path+" "+r.Header.Get("Stripe-Account")+" "+r.Header.Get("Idempotency-Key")]++
			c.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(c.Close)
	return c
}

func (c *counter) count(path, account, key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[path+" "+account+" "+key]
}

// counts returns every count.
func (c *counter) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// idemgate runs idemgate with profile stripe in front of up.
func idemgate(t *testing.T, up string) string {
	t.Helper()
	cfg, err := config.Parse([]byte(`
profile: stripe
upstream: {url: "` + up + `", timeout: 10s}
edge_limit: {rate: 0}
idempotency: {wait_timeout: 1s, max_body_bytes: 2048}
max_buffered_bytes: 1048576
routes:
  - {name: create_customer, method: POST, path: /v1/customers, idempotent: true}
  - {name: update_customer, method: POST, path: "/v1/customers/{customer}", idempotent: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := app.New(cfg, app.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	lns, err := app.Listen("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, 5*time.Second, lns) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-served:
		case <-time.After(15 * time.Second):
			t.Error("idemgate did not stop")
		}
	})
	return "http://" + lns.Public.Addr().String()
}

// client is a stripe-go client of base, with the SDK's own retries and rt
// as its transport (nil: the default).
func client(base string, rt http.RoundTripper) *stripe.Client {
	hc := &http.Client{Timeout: 20 * time.Second, Transport: rt}
	b := stripe.NewBackendsWithConfig(&stripe.BackendConfig{
		URL:               stripe.String(base),
		HTTPClient:        hc,
		MaxNetworkRetries: stripe.Int64(2),
		LeveledLogger:     &stripe.LeveledLogger{Level: stripe.LevelNull},
	})
	return stripe.NewClient("sk_test_123", stripe.WithBackends(b))
}

// dropFirstAnswer sends each request, then loses the first answer of each
// idempotency key (the connection broke after the request went out): the
// SDK retries with the same key.
type dropFirstAnswer struct {
	mu      sync.Mutex
	seen    map[string]bool
	dropped atomic.Int64
}

func (d *dropFirstAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	key := r.Header.Get("Idempotency-Key")
	d.mu.Lock()
	first := key != "" && !d.seen[key]
	d.seen[key] = true
	d.mu.Unlock()
	if first {
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		d.dropped.Add(1)
		return nil, errors.New("connection reset by peer (injected)")
	}
	return res, nil
}

// TestSDKRetriesRunOnce: every write's first answer is lost; the SDK
// retries with its automatic key, idemgate replays, and every write reaches
// stripe-mock once while the SDK gets the object.
func TestSDKRetriesRunOnce(t *testing.T) {
	up := newCounter(t)
	drop := &dropFirstAnswer{seen: map[string]bool{}}
	sc := client(idemgate(t, up.URL), drop)
	const writes = 8
	for i := range writes {
		c, err := sc.V1Customers.Create(context.Background(), &stripe.CustomerCreateParams{Email: stripe.String(fmt.Sprintf("c%d@example.com", i))})
		if err != nil || c == nil || c.ID == "" {
			t.Fatalf("write %d: %v, %v; want the customer", i, c, err)
		}
		if c.LastResponse.Header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("write %d: not a replay", i)
		}
	}
	if drop.dropped.Load() != writes {
		t.Fatalf("dropped %d answers; want %d", drop.dropped.Load(), writes)
	}
	total := 0
	for k, n := range up.counts() {
		total += n
		if n != 1 {
			t.Errorf("%s reached stripe-mock %d times; want once", k, n)
		}
	}
	if total != writes {
		t.Errorf("%d writes reached stripe-mock; want %d", total, writes)
	}
}

// TestSDKTypedErrors: a key reused with other parameters is the SDK's
// typed idempotency error, not retried (Stripe-Should-Retry: false); the
// same key on two connected accounts runs twice.
func TestSDKTypedErrors(t *testing.T) {
	up := newCounter(t)
	sc := client(idemgate(t, up.URL), nil)
	ctx := context.Background()
	p := &stripe.CustomerCreateParams{Email: stripe.String("a@example.com")}
	p.SetIdempotencyKey("order 1001")
	if _, err := sc.V1Customers.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	q := &stripe.CustomerCreateParams{Email: stripe.String("b@example.com")}
	q.SetIdempotencyKey("order 1001")
	_, err := sc.V1Customers.Create(ctx, q)
	var se *stripe.Error
	if !errors.As(err, &se) || se.Type != stripe.ErrorTypeIdempotency || se.HTTPStatusCode != 409 || se.RequestID == "" {
		t.Errorf("reused key: %#v; want the SDK's idempotency error with a request id", err)
	}
	if n := up.count("/v1/customers", "", "order 1001"); n != 1 {
		t.Errorf("the key reached stripe-mock %d times; want 1 (the reuse neither ran nor was retried)", n)
	}

	for _, acct := range []string{"acct_A", "acct_B"} {
		p := &stripe.CustomerCreateParams{Email: stripe.String("c@example.com")}
		p.SetIdempotencyKey("shared-key")
		p.SetStripeAccount(acct)
		if _, err := sc.V1Customers.Create(ctx, p); err != nil {
			t.Fatalf("%s: %v", acct, err)
		}
		if n := up.count("/v1/customers", acct, "shared-key"); n != 1 {
			t.Errorf("%s: its write reached stripe-mock %d times; want 1", acct, n)
		}
	}

	bad := &stripe.CustomerCreateParams{Email: stripe.String("d@example.com")}
	bad.SetIdempotencyKey(" leading space is trimmed, but this \u00e9 is not printable")
	_, err = sc.V1Customers.Create(ctx, bad)
	if !errors.As(err, &se) || se.Type != stripe.ErrorTypeInvalidRequest || se.HTTPStatusCode != 400 || string(se.Code) != "idempotency_key_invalid" {
		t.Errorf("invalid key: %#v; want the SDK's invalid request error", err)
	}
}

// TestSDKInProgressAndLimits: a duplicate of a running write waits for it
// (in_progress: wait); past its wait_timeout it is the SDK's typed
// idempotency error idempotency_key_in_use, 409. stripe-go v82 raises such
// a parsed API error to the application without retrying it (its retrier
// retries only a 429 lock_timeout; Stripe-Should-Retry is read only for
// answers that are not Stripe errors), so wait_timeout is what keeps an
// SDK retry racing its original from failing. The write runs once. A body
// over max_body_bytes is the SDK's typed invalid request error, 413.
func TestSDKInProgressAndLimits(t *testing.T) {
	up := newCounter(t)
	sc := client(idemgate(t, up.URL), nil)
	ctx := context.Background()
	slow := func(delay string) *stripe.CustomerCreateParams {
		p := &stripe.CustomerCreateParams{Email: stripe.String("slow@example.com")}
		p.SetIdempotencyKey("slow-key-" + delay)
		p.Headers = http.Header{"X-Delay": {delay}}
		return p
	}
	for _, tc := range []struct {
		delay string
		inUse bool // the original outlives the duplicate's wait (1s)
	}{{"500ms", false}, {"2500ms", true}} {
		orig := make(chan *stripe.Customer, 1)
		go func() {
			c, err := sc.V1Customers.Create(ctx, slow(tc.delay))
			if err != nil {
				t.Error(err)
			}
			orig <- c
		}()
		time.Sleep(100 * time.Millisecond) // the original is on its way
		dup, err := sc.V1Customers.Create(ctx, slow(tc.delay))
		first := <-orig
		var se *stripe.Error
		switch {
		case tc.inUse && (!errors.As(err, &se) || se.Type != stripe.ErrorTypeIdempotency || se.Code != stripe.ErrorCodeIdempotencyKeyInUse || se.HTTPStatusCode != 409):
			t.Errorf("duplicate past its wait: %v; want the SDK's idempotency_key_in_use", err)
		case !tc.inUse && (err != nil || first == nil || dup.ID != first.ID || dup.LastResponse.Header.Get("Idempotent-Replayed") != "true"):
			t.Errorf("duplicate of a running write: %v, %v; want the original's %v replayed", dup, err, first)
		}
		if n := up.count("/v1/customers", "", "slow-key-"+tc.delay); n != 1 {
			t.Errorf("%s: the write reached stripe-mock %d times; want once", tc.delay, n)
		}
	}

	big := &stripe.CustomerCreateParams{Description: stripe.String(strings.Repeat("x", 4096))}
	big.SetIdempotencyKey("big")
	_, err := sc.V1Customers.Create(ctx, big)
	var se *stripe.Error
	if !errors.As(err, &se) || se.Type != stripe.ErrorTypeInvalidRequest || se.HTTPStatusCode != 413 || string(se.Code) != "request_too_large" {
		t.Errorf("body over max_body_bytes: %#v; want the SDK's invalid request error, 413", err)
	}
}
