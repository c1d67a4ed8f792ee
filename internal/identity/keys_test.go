package identity_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

func urlResolver(t *testing.T, url string) (*identity.Resolver, *testutil.Clock) {
	t.Helper()
	clk := newClock()
	r, err := identity.New(identity.Options{Now: clk.Now, JWT: &identity.JWTOptions{
		JWKSURL: url, Leeway: 30 * time.Second,
		MinRefreshInterval: 30 * time.Second, RefreshInterval: time.Hour,
	}})
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
	waitFor(t, func() bool { return r.Stats().KeySetErrors == 2 })
	check("down after refresh interval", sign(t, rsaA, true, fmt.Sprintf(`{"iss":"i","sub":"dave",%s}`, long)), identity.Present, 5)
	srv.down.Store(false)
	srv.set(jwks(t, rsaB))
	clk.Advance(time.Minute)
	r.Resolve(bearerReq(tokB))
	waitFor(t, func() bool { return srv.gets.Load() == 6 && r.Stats().KeySetLoads == 4 })
	waitFor(t, func() bool { return r.Resolve(bearerReq(tokA)).Status == identity.Invalid })
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

// TestJWKSURLDownAtStart: with no keys at all, tokens are invalid, the
// endpoint is asked at most once per MinRefreshInterval, and the waiting
// request stops at its context's end.
func TestJWKSURLDownAtStart(t *testing.T) {
	t.Parallel()
	keys(t)
	srv := newJWKSServer(t, jwks(t, rsaA))
	srv.down.Store(true)
	r, clk := urlResolver(t, srv.URL)
	tok := sign(t, rsaA, true, claims("alice"))
	for range 3 {
		if res := r.Resolve(bearerReq(tok)); !errors.Is(res.Err, identity.ErrUnknownKey) {
			t.Fatalf("Resolve = %v, %v; want unknown key", res.Status, res.Err)
		}
	}
	if got := srv.gets.Load(); got != 1 {
		t.Errorf("%d fetches; want 1", got)
	}
	srv.down.Store(false)
	clk.Advance(30 * time.Second)
	if res := r.Resolve(bearerReq(tok)); res.Status != identity.Present {
		t.Fatalf("back up: Resolve = %v, %v", res.Status, res.Err)
	}

	// A hung endpoint: the request's context bounds the wait.
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(hang)
	r2, _ := urlResolver(t, slow.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req := bearerReq(tok).WithContext(ctx)
	start := time.Now()
	if res := r2.Resolve(req); res.Status != identity.Invalid {
		t.Errorf("hung endpoint: Resolve = %v; want invalid", res.Status)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Resolve waited %v; want about the context's 50ms", d)
	}
}

// waitFor polls cond until it holds, for at most 5 seconds: background
// fetches run on real goroutines and a real loopback server.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
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
