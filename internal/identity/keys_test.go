package identity_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/internal/testutil"
)

// TestJWKSFileRotation: a rotated file is picked up without a restart (at
// most a second later, by the injected clock), a removed key stops its
// tokens at once, cached ones included, and a broken file keeps the keys in
// force.
func TestJWKSFileRotation(t *testing.T) {
	t.Parallel()
	keys(t)
	r, clk, path := fileResolver(t, nil, rsaA)
	tokA := sign(t, rsaA, true, claims("alice"))
	tokB := sign(t, rsaB, true, claims("alice"))
	tokEd := sign(t, edA, false, claims("alice"))
	check := func(step, tok string, want identity.Status) {
		t.Helper()
		if res := r.Resolve(bearerReq(tok)); res.Status != want {
			t.Fatalf("%s: Resolve = %v, %v; want %v", step, res.Status, res.Err, want)
		}
	}
	check("start, key A", tokA, identity.Present)
	check("start, key B unknown", tokB, identity.Invalid)

	writeFile(t, path, jwks(t, rsaA, rsaB))
	check("rotated, not yet checked", tokB, identity.Invalid)
	clk.Advance(time.Second)
	check("rotated, B added", tokB, identity.Present)
	check("rotated, A kept", tokA, identity.Present)

	writeFile(t, path, jwks(t, rsaB, edA))
	clk.Advance(time.Second)
	check("A removed: its cached token stops", tokA, identity.Invalid)
	check("B kept", tokB, identity.Present)
	check("no kid, Ed25519 added", tokEd, identity.Present)

	writeFile(t, path, []byte(`{"keys":[`))
	clk.Advance(time.Second)
	check("broken file keeps the keys", tokB, identity.Present)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	check("missing file keeps the keys", tokB, identity.Present)
	if st := r.Stats(); st.KeySetErrors != 2 {
		t.Errorf("KeySetErrors = %d; want 2", st.KeySetErrors)
	}
	writeFile(t, path, []byte(`{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}`))
	clk.Advance(time.Second)
	check("a set without signature keys keeps the keys", tokB, identity.Present)
}

// jwksServer serves a JWK Set that tests swap, counting GETs; down makes it
// answer 503.
type jwksServer struct {
	*httptest.Server
	mu   sync.Mutex
	body []byte
	gets atomic.Int64
	down atomic.Bool
}

func newJWKSServer(t *testing.T, body []byte) *jwksServer {
	s := &jwksServer{body: body}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.gets.Add(1)
		if s.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		s.mu.Lock()
		b := s.body
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(b)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) set(b []byte) {
	s.mu.Lock()
	s.body = b
	s.mu.Unlock()
}

// urlResolver returns a resolver of the JWK Set at url, with a fake clock
// at t0. Requests wait up to 10s for a fetch (a loaded machine's loopback
// can be slow) unless mod says otherwise.
func urlResolver(t *testing.T, url string, mod ...func(*identity.JWTOptions)) (*identity.Resolver, *testutil.Clock) {
	t.Helper()
	clk := newClock()
	o := &identity.JWTOptions{
		JWKSURL: url, Leeway: 30 * time.Second,
		MinRefreshInterval: 30 * time.Second, RefreshInterval: time.Hour,
		FetchWait: 10 * time.Second,
	}
	for _, m := range mod {
		m(o)
	}
	r, err := identity.New(identity.Options{Now: clk.Now, JWT: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, clk
}

// TestJWKSURL: the first fetch is waited for; an unknown kid makes one
// refetch, and more unknown kids within MinRefreshInterval of the last
// attempt make none; a
// rotation is seen; while the endpoint is down, keys in hand still verify.
func TestJWKSURL(t *testing.T) {
	t.Parallel()
	keys(t)
	srv := newJWKSServer(t, jwks(t, rsaA))
	r, clk := urlResolver(t, srv.URL)
	long := fmt.Sprintf(`"exp":%d`, t0.Add(24*time.Hour).Unix())
	tokA := sign(t, rsaA, true, fmt.Sprintf(`{"iss":"i","sub":"alice",%s}`, long))
	tokB := sign(t, rsaB, true, fmt.Sprintf(`{"iss":"i","sub":"bob",%s}`, long))
	tokEd := sign(t, edA, true, fmt.Sprintf(`{"iss":"i","sub":"ed",%s}`, long))
	check := func(step, tok string, want identity.Status, gets int64) {
		t.Helper()
		if res := r.Resolve(bearerReq(tok)); res.Status != want {
			t.Fatalf("%s: Resolve = %v, %v; want %v", step, res.Status, res.Err, want)
		}
		if got := srv.gets.Load(); got != gets {
			t.Fatalf("%s: %d fetches; want %d", step, got, gets)
		}
	}
	check("first fetch", tokA, identity.Present, 1)
	check("unknown kid right after the first fetch: rate bound", tokB, identity.Invalid, 1)
	clk.Advance(30 * time.Second)
	check("unknown kid refetches", tokB, identity.Invalid, 2)
	for range 5 {
		check("unknown kid again: rate bound", tokB, identity.Invalid, 2)
	}

	srv.set(jwks(t, rsaA, rsaB))
	clk.Advance(29 * time.Second)
	check("rotated, still within the bound", tokB, identity.Invalid, 2)
	clk.Advance(time.Second)
	check("rotated, refetched", tokB, identity.Present, 3)
	check("known kid: no fetch", tokA, identity.Present, 3)

	srv.down.Store(true)
	clk.Advance(time.Minute)
	check("down: unknown kid tries once", tokEd, identity.Invalid, 4)
	check("down: cached token", tokB, identity.Present, 4)
	fresh := sign(t, rsaA, false, claims("carol"))
	check("down: a new token by a known key", fresh, identity.Present, 4)

	// A periodic refresh that fails keeps the keys; one that works after
	// the endpoint is back drops a removed key.
	clk.Advance(time.Hour)
	r.Resolve(bearerReq(tokA)) // starts a background refresh
	testutil.Eventually(t, 5*time.Second, "a second key set error", func() bool { return r.Stats().KeySetErrors == 2 })
	check("down after refresh interval", sign(t, rsaA, true, fmt.Sprintf(`{"iss":"i","sub":"dave",%s}`, long)), identity.Present, 5)
	srv.down.Store(false)
	srv.set(jwks(t, rsaB))
	clk.Advance(time.Minute)
	r.Resolve(bearerReq(tokB))
	testutil.Eventually(t, 5*time.Second, "6 fetches and 4 key set loads", func() bool { return srv.gets.Load() == 6 && r.Stats().KeySetLoads == 4 })
	testutil.Eventually(t, 5*time.Second, "key A removed", func() bool { return r.Resolve(bearerReq(tokA)).Status == identity.Invalid })
	check("refreshed: A removed, B kept", tokB, identity.Present, 6)
}

// TestJWKSURLConcurrentUnknownKid: many requests with an unknown kid at
// once cause exactly one fetch, and all of them see its result.
func TestJWKSURLConcurrentUnknownKid(t *testing.T) {
	t.Parallel()
	keys(t)
	srv := newJWKSServer(t, jwks(t, rsaA))
	r, clk := urlResolver(t, srv.URL)
	if res := r.Resolve(bearerReq(sign(t, rsaA, true, claims("a")))); res.Status != identity.Present {
		t.Fatal(res.Err)
	}
	srv.set(jwks(t, rsaA, edA))
	clk.Advance(time.Minute)
	const n = 32
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := range n {
		tok := sign(t, edA, true, claims(fmt.Sprint("u", i)))
		wg.Go(func() {
			if res := r.Resolve(bearerReq(tok)); res.Status == identity.Present {
				ok.Add(1)
			} else {
				t.Log(res.Err)
			}
		})
	}
	wg.Wait()
	if got := srv.gets.Load(); got != 2 {
		t.Errorf("%d fetches; want 2 (the first and one refetch)", got)
	}
	if ok.Load() != n {
		t.Errorf("%d of %d verified; want all", ok.Load(), n)
	}
}

// TestJWKSURLLateStart: the JWK Set URL refuses connections at start, then
// answers 503, then serves. Meanwhile a good token is Unavailable (503 in
// the proxy), never Invalid (401 invalid_token), and a forged one stays
// Invalid; the URL is tried again after the injected backoff, not after
// MinRefreshInterval (the fake clock never moves), and the token verifies
// soon after the server is up. Then fetching stops; a forged token is
// Invalid, and random kids cause at most one fetch per MinRefreshInterval.
func TestJWKSURLLateStart(t *testing.T) {
	t.Parallel()
	keys(t)
	srv := newJWKSServer(t, jwks(t, rsaA))
	var target atomic.Pointer[string]
	dead := testutil.DeadAddr(t)
	target.Store(&dead)
	// Real loopback connections: to a closed port (refused) until the test
	// points the dialer at the server.
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, *target.Load())
	}}
	t.Cleanup(tr.CloseIdleConnections)
	var attempts atomic.Int64
	r, clk := urlResolver(t, "http://idp.test/jwks.json", func(o *identity.JWTOptions) {
		o.HTTPClient = &http.Client{Transport: tr, Timeout: 10 * time.Second}
		o.LoadBackoff = func(int) time.Duration { attempts.Add(1); return 5 * time.Millisecond }
	})
	good := sign(t, rsaA, true, claims("alice"))
	// Tokens that no key set can make valid: not a JWS; alg "none"; an
	// algorithm outside the allow-list.
	forged := []string{
		"x.y.z",
		b64(`{"alg":"none"}`) + "." + b64(claims("alice")) + ".",
		b64(`{"alg":"HS256","kid":"rsa-a"}`) + "." + b64(claims("alice")) + "." + b64("sig"),
	}
	unavailable := func(step string) {
		t.Helper()
		res := r.Resolve(bearerReq(good))
		if res.Status != identity.Unavailable || !errors.Is(res.Err, identity.ErrUnavailable) || errors.Is(res.Err, identity.ErrInvalid) {
			t.Fatalf("%s: a good token = %v, %v; want unavailable, never invalid", step, res.Status, res.Err)
		}
		for _, tok := range forged {
			if res := r.Resolve(bearerReq(tok)); res.Status != identity.Invalid {
				t.Errorf("%s: a malformed token = %v, %v; want invalid: no key is needed to tell", step, res.Status, res.Err)
			}
		}
	}
	unavailable("refused")
	testutil.Eventually(t, 5*time.Second, "three key set errors", func() bool { return r.Stats().KeySetErrors >= 3 })
	unavailable("refused, retried")
	if srv.gets.Load() != 0 {
		t.Fatalf("the server was asked before it was reachable")
	}

	srv.down.Store(true)
	target.Store(&strings.Split(srv.URL, "//")[1])
	testutil.Eventually(t, 5*time.Second, "two fetches answered 503", func() bool { return srv.gets.Load() >= 2 })
	unavailable("answering 503")

	srv.down.Store(false)
	testutil.Eventually(t, 5*time.Second, "the key set loaded after the server came up", func() bool { return r.Resolve(bearerReq(good)).Status == identity.Present })
	if n := attempts.Load(); n < 4 {
		t.Errorf("%d backoff waits; want one per failed attempt (at least 4)", n)
	}
	gets := srv.gets.Load()

	// Loaded: the start loop is over, and nothing fetches without a cause.
	time.Sleep(50 * time.Millisecond)
	if r.Resolve(bearerReq(good)).Status != identity.Present || srv.gets.Load() != gets {
		t.Errorf("after the load: %d more fetches; want none", srv.gets.Load()-gets)
	}
	// Forged tokens are Invalid again, not Unavailable: a key of the
	// wrong signer under a known kid, and unknown kids.
	wrongSigner := sign(t, testKey{rsaA.kid, rsaB.alg, rsaB.priv}, true, claims("mallory"))
	if res := r.Resolve(bearerReq(wrongSigner)); res.Status != identity.Invalid || !errors.Is(res.Err, identity.ErrSignature) {
		t.Errorf("a forged signature = %v, %v; want invalid signature", res.Status, res.Err)
	}
	clk.Advance(31 * time.Second)
	const n = 32
	var wg sync.WaitGroup
	var invalid atomic.Int64
	for i := range n {
		tok := sign(t, testKey{fmt.Sprint("random-", i), rsaB.alg, rsaB.priv}, true, claims("mallory"))
		wg.Go(func() {
			if res := r.Resolve(bearerReq(tok)); res.Status == identity.Invalid && errors.Is(res.Err, identity.ErrUnknownKey) {
				invalid.Add(1)
			}
		})
	}
	wg.Wait()
	if got := srv.gets.Load() - gets; got != 1 {
		t.Errorf("%d random kids fetched the set %d times; want 1", n, got)
	}
	if invalid.Load() != n {
		t.Errorf("%d of %d random kids invalid; want all", invalid.Load(), n)
	}
}

// hungJWKS is a JWK Set server whose answers wait until release is closed
// (or the client gives up); it counts requests.
func hungJWKS(t *testing.T, body []byte) (srv *httptest.Server, release func(), gets *atomic.Int64) {
	t.Helper()
	gets = &atomic.Int64{}
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(release)
	return srv, release, gets
}

// TestJWKSURLSlowAtStart: a JWK Set URL that does not answer. Every request
// waits at most FetchWait (not the fetch's 10s timeout) and gets
// Unavailable; all of them share one fetch; the keys are used as soon as it
// ends.
func TestJWKSURLSlowAtStart(t *testing.T) {
	t.Parallel()
	keys(t)
	srv, release, gets := hungJWKS(t, jwks(t, rsaA))
	r, _ := urlResolver(t, srv.URL, func(o *identity.JWTOptions) { o.FetchWait = 50 * time.Millisecond })
	good := sign(t, rsaA, true, claims("alice"))
	const n = 16
	var wg sync.WaitGroup
	var unavailable atomic.Int64
	start := time.Now()
	for range n {
		wg.Go(func() {
			if res := r.Resolve(bearerReq(good)); res.Status == identity.Unavailable && errors.Is(res.Err, identity.ErrUnavailable) {
				unavailable.Add(1)
			} else {
				t.Errorf("Resolve during a hung fetch = %v, %v; want unavailable", res.Status, res.Err)
			}
		})
	}
	wg.Wait()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("%d requests took %v; each should wait about FetchWait (50ms), not the fetch", n, d)
	}
	if unavailable.Load() != n || gets.Load() != 1 {
		t.Errorf("%d unavailable, %d fetches; want %d, 1 (one fetch, shared)", unavailable.Load(), gets.Load(), n)
	}
	release()
	testutil.Eventually(t, 5*time.Second, "the key set loaded", func() bool { return r.Resolve(bearerReq(good)).Status == identity.Present })
	if gets.Load() != 1 {
		t.Errorf("%d fetches; want 1", gets.Load())
	}
}

// TestJWKSURLSlowRefresh: with keys loaded, a token with an unknown kid
// whose refresh hangs is Unavailable after FetchWait, while tokens of known
// keys verify meanwhile; the request's context bounds the wait too.
func TestJWKSURLSlowRefresh(t *testing.T) {
	t.Parallel()
	keys(t)
	var slow atomic.Bool
	hang := make(chan struct{})
	var gets atomic.Int64
	body := atomic.Pointer[[]byte]{}
	first := jwks(t, rsaA)
	body.Store(&first)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		if slow.Load() {
			select {
			case <-hang:
			case <-r.Context().Done():
				return
			}
		}
		w.Write(*body.Load())
	}))
	t.Cleanup(srv.Close)
	var once sync.Once
	release := func() { once.Do(func() { close(hang) }) }
	t.Cleanup(release)
	r, clk := urlResolver(t, srv.URL, func(o *identity.JWTOptions) { o.FetchWait = 50 * time.Millisecond })
	tokA := sign(t, rsaA, true, claims("alice"))
	// The first fetch is not slowed, but a loaded machine may serve it
	// after FetchWait (a clean-clone CI run drew it): wait for it, bounded.
	deadline := time.Now().Add(10 * time.Second)
	for res := r.Resolve(bearerReq(tokA)); res.Status != identity.Present; res = r.Resolve(bearerReq(tokA)) {
		if time.Now().After(deadline) {
			t.Fatal(res.Err)
		}
	}
	rotated := jwks(t, rsaA, edA)
	body.Store(&rotated)
	slow.Store(true)
	clk.Advance(time.Minute)
	tokEd := sign(t, edA, true, claims("ed"))
	start := time.Now()
	if res := r.Resolve(bearerReq(tokEd)); res.Status != identity.Unavailable {
		t.Errorf("a new kid while the refresh hangs = %v, %v; want unavailable", res.Status, res.Err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if res := r.Resolve(bearerReq(tokEd).WithContext(ctx)); res.Status != identity.Unavailable {
		t.Errorf("a new kid, context ending first = %v, %v; want unavailable", res.Status, res.Err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("two requests took %v; want about FetchWait each", d)
	}
	if res := r.Resolve(bearerReq(sign(t, rsaA, true, claims("bob")))); res.Status != identity.Present {
		t.Errorf("a known kid while the refresh hangs = %v, %v; want present", res.Status, res.Err)
	}
	if gets.Load() != 2 {
		t.Errorf("%d fetches; want 2 (the first, one refresh)", gets.Load())
	}
	release()
	testutil.Eventually(t, 5*time.Second, "the Ed25519 key loaded", func() bool { return r.Resolve(bearerReq(tokEd)).Status == identity.Present })
}

// TestLogsHoldNoSecrets: key set loads and failures are logged, and no
// token, claim value or cookie appears in the log.
func TestLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	keys(t)
	var buf testutil.SyncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	path := t.TempDir() + "/jwks.json"
	writeFile(t, path, jwks(t, rsaA))
	clk := newClock()
	r, err := identity.New(identity.Options{Cookies: []string{"sid"}, Now: clk.Now, Logger: log, JWT: &identity.JWTOptions{JWKSFile: path}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	good := sign(t, rsaA, true, claims("alice-secret-sub"))
	bad := sign(t, rsaB, true, claims("mallory-secret-sub"))
	for _, tok := range []string{good, bad, "x.y.z"} {
		q := bearerReq(tok)
		q.Header.Set("Cookie", "sid=cookie-secret-value")
		r.Resolve(q)
	}
	writeFile(t, path, []byte("{broken"))
	clk.Advance(time.Second)
	r.Resolve(bearerReq(bad))
	out := buf.String()
	if !strings.Contains(out, "JWK Set loaded") || !strings.Contains(out, "not reloaded") {
		t.Errorf("log = %q; want the load and the failed reload", out)
	}
	for _, secret := range []string{good, bad, good[:40], "alice-secret-sub", "mallory-secret-sub", "cookie-secret-value"} {
		if strings.Contains(out, secret) {
			t.Errorf("log holds %q", secret)
		}
	}
}
