package app

// End-to-end tests of the identity (issue 14, Proof): an app built from a
// config, real keys, real tokens, a real upstream that counts what ran.

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
)

// t0 is the identity clock's start in these tests.
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

type signKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

var (
	signKeysOnce               sync.Once
	rsa1, rsa2, ed1, otherRSA1 signKey
)

// signKeys generates the tests' keys once (RSA is slow). otherRSA1 has
// rsa1's kid but another key: a forger's.
func signKeys(t *testing.T) {
	t.Helper()
	signKeysOnce.Do(func() {
		gen := func() *rsa.PrivateKey {
			k, err := rsa.GenerateKey(rand.Reader, 2048)
			if err != nil {
				panic(err)
			}
			return k
		}
		_, ed, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err)
		}
		rsa1 = signKey{"rsa-1", jose.RS256, gen()}
		rsa2 = signKey{"rsa-2", jose.RS256, gen()}
		ed1 = signKey{"ed-1", jose.EdDSA, ed}
		otherRSA1 = signKey{"rsa-1", jose.RS256, gen()}
	})
}

func jwksOf(t *testing.T, ks ...signKey) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for _, k := range ks {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.priv.Public(), KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// token signs claims (a JSON object) with k, kid in the header.
func token(t *testing.T, k signKey, claims map[string]any) string {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: k.priv}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", k.kid))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// claimsAt returns the claims of a token for sub issued at iat, living an
// hour, from the accepted issuer to the accepted audience.
func claimsAt(sub string, iat time.Time) map[string]any {
	return map[string]any{"iss": "https://idp.example", "aud": []string{"shop", "other"}, "sub": sub,
		"iat": iat.Unix(), "exp": iat.Add(time.Hour).Unix(), "jti": fmt.Sprint(iat.UnixNano())}
}

func with(c map[string]any, kv ...any) map[string]any {
	out := map[string]any{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// unsigned is an alg none token of claims.
func unsigned(t *testing.T, claims map[string]any) string {
	b, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc(b) + "."
}

func writeAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// identityApp runs an app for yaml with the identity clock clk and returns
// its public base URL.
func identityApp(t *testing.T, yaml string, clk *testutil.Clock) (string, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	a, err := New(e2eConfig(t, yaml), Options{Logger: slog.New(slog.NewJSONHandler(logs, nil)), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return serveTestApp(t, a), logs
}

func orderYAML(upstream, identity string) string {
	return `
upstream: {url: "` + upstream + `"}
edge_limit: {rate: 0}
idempotency:
  identity:
` + identity + `
routes:
  - {name: create_order, method: POST, path: /orders, idempotent: true}
`
}

// order posts {"sku":"tea"} to /orders with key and the headers hdr.
func order(t *testing.T, base, key string, hdr ...string) httpAnswer {
	t.Helper()
	return doHTTP(t, http.DefaultClient, "POST", base+"/orders", `{"sku":"tea"}`, append([]string{"Idempotency-Key", key, "Content-Type", "application/json"}, hdr...)...)
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// TestIdentityJWTFile: a JWT identity verified with a JWK Set file holding
// an RSA and an Ed25519 key. The same user's refreshed token replays;
// another user with the same key runs separately; every token that does
// not verify gets 401 and nothing runs; a rotation of the file is picked
// up without a restart.
func TestIdentityJWTFile(t *testing.T) {
	t.Parallel()
	signKeys(t)
	up := newCountingUpstream(t)
	jwks := filepath.Join(t.TempDir(), "jwks.json")
	writeAtomic(t, jwks, jwksOf(t, rsa1, ed1))
	clk := testutil.NewClock(t0)
	base, logs := identityApp(t, orderYAML(up.URL, `    jwt:
      jwks_file: "`+jwks+`"
      issuers: ["https://idp.example"]
      audiences: ["shop"]
      algorithms: ["RS256", "EdDSA"]
      leeway: 30s`), clk)

	alice := token(t, rsa1, claimsAt("alice", t0))
	first := order(t, base, "jwt-1", bearer(alice)...)
	if first.status != 201 {
		t.Fatalf("alice's first write = %v; want 201", first)
	}
	// A refreshed token: signed later, by the Ed25519 key, same iss and sub.
	refreshed := token(t, ed1, claimsAt("alice", t0.Add(10*time.Minute)))
	clk.Advance(10 * time.Minute)
	if r := order(t, base, "jwt-1", bearer(refreshed)...); r.status != 201 || r.body != first.body || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("alice's retry with a refreshed token = %v (replayed %q); want her replayed answer %v", r, r.header.Get("Idempotent-Replayed"), first)
	}
	if n := up.count("/orders", "jwt-1"); n != 1 {
		t.Fatalf("upstream ran jwt-1 %d times after a retry with a refreshed token; want 1", n)
	}
	// Bob, same key and body, his own token: his own write.
	bob := token(t, rsa1, claimsAt("bob", clk.Now()))
	if r := order(t, base, "jwt-1", bearer(bob)...); r.status != 201 || r.body == first.body || r.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("bob with alice's key = %v; want his own 201", r)
	}
	if n := up.count("/orders", "jwt-1"); n != 2 {
		t.Errorf("upstream ran jwt-1 %d times after bob; want 2", n)
	}

	now := clk.Now()
	invalid := []struct{ name, tok string }{
		{"another key, same kid", token(t, otherRSA1, claimsAt("alice", now))},
		{"alg none", unsigned(t, claimsAt("alice", now))},
		{"expired past leeway", token(t, rsa1, with(claimsAt("alice", now.Add(-2*time.Hour)), "exp", now.Add(-31*time.Second).Unix()))},
		{"wrong issuer", token(t, rsa1, with(claimsAt("alice", now), "iss", "https://evil.example"))},
		{"wrong audience", token(t, rsa1, with(claimsAt("alice", now), "aud", "payments"))},
		{"no sub", token(t, ed1, with(claimsAt("alice", now), "sub", nil))},
		{"not a JWT", "alice"},
	}
	for i, tc := range invalid {
		key := fmt.Sprintf("bad-%d", i)
		r := order(t, base, key, bearer(tc.tok)...)
		if r.status != 401 || !strings.Contains(r.body, `"idempotency_identity_invalid"`) || r.header.Get("WWW-Authenticate") != `Bearer error="invalid_token"` {
			t.Errorf("%s: %v, WWW-Authenticate %q; want 401 idempotency_identity_invalid with Bearer error=\"invalid_token\"", tc.name, r, r.header.Get("WWW-Authenticate"))
		}
		if n := up.count("/orders", key); n != 0 {
			t.Errorf("%s: the upstream ran it %d times; want 0", tc.name, n)
		}
	}
	// Within the leeway, an expired token still verifies.
	late := token(t, rsa1, with(claimsAt("carol", now.Add(-2*time.Hour)), "exp", now.Add(-20*time.Second).Unix()))
	if r := order(t, base, "late", bearer(late)...); r.status != 201 {
		t.Errorf("a token expired 20s ago, leeway 30s = %v; want 201", r)
	}
	if r := order(t, base, "none"); r.status != 400 || !strings.Contains(r.body, `"idempotency_identity_missing"`) {
		t.Errorf("no token = %v; want 400 idempotency_identity_missing", r)
	}

	// Rotation: rsa-1 leaves, rsa-2 comes; no restart. The file is read
	// again at most once a second of the identity's clock.
	writeAtomic(t, jwks, jwksOf(t, rsa2, ed1))
	clk.Advance(2 * time.Second)
	if r := order(t, base, "rot-2", bearer(token(t, rsa2, claimsAt("dave", clk.Now())))...); r.status != 201 {
		t.Errorf("a token of the new key after the rotation = %v; want 201", r)
	}
	if r := order(t, base, "rot-1", bearer(alice)...); r.status != 401 {
		t.Errorf("a token of the removed key after the rotation = %v; want 401", r)
	}
	for _, s := range []string{alice, refreshed, bob, "alice", "bob"} {
		if strings.Contains(logs.String(), s) {
			t.Errorf("the log holds a token or a claim value %.20q", s)
		}
	}
}

// TestIdentityJWKSURL: keys from a JWK Set URL on a loopback server: an
// unknown kid fetches the set again (at most every 30s), and while the
// server is down the keys fetched last keep verifying.
func TestIdentityJWKSURL(t *testing.T) {
	t.Parallel()
	signKeys(t)
	var set atomic.Pointer[[]byte]
	var fetches atomic.Int32
	var down atomic.Bool
	first := jwksOf(t, rsa1)
	set.Store(&first)
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		if down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(*set.Load())
	}))
	t.Cleanup(idp.Close)
	up := newCountingUpstream(t)
	clk := testutil.NewClock(t0)
	base, _ := identityApp(t, orderYAML(up.URL, `    jwt:
      jwks_url: "`+idp.URL+`/jwks.json"
      claims: ["sub"]`), clk)

	if r := order(t, base, "u-1", bearer(token(t, rsa1, claimsAt("alice", t0)))...); r.status != 201 {
		t.Fatalf("a token of the fetched key = %v; want 201", r)
	}
	// The IdP rotates: rsa-2 is new. Its first token fetches the set again
	// (30s after the last fetch).
	second := jwksOf(t, rsa1, rsa2)
	set.Store(&second)
	clk.Advance(31 * time.Second)
	before := fetches.Load()
	if r := order(t, base, "u-2", bearer(token(t, rsa2, claimsAt("bob", clk.Now())))...); r.status != 201 {
		t.Errorf("a token of the rotated-in key = %v; want 201 after a fetch", r)
	}
	if fetches.Load() != before+1 {
		t.Errorf("the unknown kid fetched the set %d times; want 1", fetches.Load()-before)
	}
	// The IdP is down: cached keys still verify; an unknown kid is 401 and
	// does not hammer the IdP.
	down.Store(true)
	clk.Advance(31 * time.Second)
	if r := order(t, base, "u-3", bearer(token(t, rsa2, claimsAt("carol", clk.Now())))...); r.status != 201 {
		t.Errorf("a cached key while the IdP is down = %v; want 201", r)
	}
	before = fetches.Load()
	for i := range 5 {
		if r := order(t, base, fmt.Sprintf("u-x%d", i), bearer(token(t, signKey{"rsa-9", jose.RS256, otherRSA1.priv}, claimsAt("mallory", clk.Now())))...); r.status != 401 {
			t.Errorf("an unknown kid while the IdP is down = %v; want 401", r)
		}
	}
	if n := fetches.Load() - before; n > 1 {
		t.Errorf("5 unknown kids within 30s fetched the set %d times; want at most 1", n)
	}
	if n := up.count("/orders", "u-x0"); n != 0 {
		t.Errorf("the upstream ran a write with an unverified token %d times", n)
	}
}

// jwksOutageYAML is a config whose identity is a JWK Set URL: /orders is
// keyed, /limited is keyed and limited to one request an hour per identity.
func jwksOutageYAML(upstream, jwksURL string) string {
	return `
upstream: {url: "` + upstream + `"}
edge_limit: {rate: 0}
idempotency:
  identity:
    jwt:
      jwks_url: "` + jwksURL + `"
      claims: ["sub"]
routes:
  - {name: create_order, method: POST, path: /orders, idempotent: true}
  - {name: limited, method: POST, path: /limited, idempotent: true, rate_limit: {requests: 1, per: 1h, by: identity}}
`
}

// wantIdentityUnavailable checks a 503 idempotency_unavailable with
// Retry-After and no invalid_token challenge.
func wantIdentityUnavailable(t *testing.T, step string, r httpAnswer) {
	t.Helper()
	if r.status != 503 || !strings.Contains(r.body, `"idempotency_unavailable"`) || r.header.Get("Retry-After") == "" || r.header.Get("WWW-Authenticate") != "" {
		t.Fatalf("%s: a valid token = %v (Retry-After %q, WWW-Authenticate %q); want 503 idempotency_unavailable with Retry-After, never 401 invalid_token",
			step, r, r.header.Get("Retry-After"), r.header.Get("WWW-Authenticate"))
	}
}

// TestIdentityJWKSURLLateStart (issue 28, item 4): the JWK Set URL is down
// at start (its connections are cut) and comes up later. Until the keys
// load, a valid token's keyed write gets 503 idempotency_unavailable with
// Retry-After (never 401 invalid_token, which tells a client to discard a
// good token), nothing runs, and a route limit by identity counts it per
// address. The URL is tried again within a short backoff (the identity
// clock never moves: no 30s interval is waited out), and the write goes
// through soon after the server is up; then a forged token is 401 again.
func TestIdentityJWKSURLLateStart(t *testing.T) {
	t.Parallel()
	signKeys(t)
	var up atomic.Bool
	var gets, failed atomic.Int32
	set := jwksOf(t, rsa1)
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		if !up.Load() {
			failed.Add(1)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // the connection is cut: no answer at all
			}
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Write(set)
	}))
	t.Cleanup(idp.Close)
	ups := newCountingUpstream(t)
	base, _ := identityApp(t, jwksOutageYAML(ups.URL, idp.URL+"/jwks.json"), testutil.NewClock(t0))
	alice := bearer(token(t, rsa1, claimsAt("alice", t0)))
	bob := bearer(token(t, rsa1, claimsAt("bob", t0)))

	wantIdentityUnavailable(t, "IdP down", order(t, base, "o-1", alice...))
	testutil.Eventually(t, 10*time.Second, "three failed fetches", func() bool { return failed.Load() >= 3 })
	wantIdentityUnavailable(t, "IdP still down", order(t, base, "o-1", alice...))
	// A limit by identity counts an unverifiable identity per address:
	// Bob's valid token from the same address buys no fresh budget.
	limited := func(who []string) httpAnswer {
		return doHTTP(t, http.DefaultClient, "POST", base+"/limited", `{"sku":"tea"}`, append([]string{"Idempotency-Key", "l-1", "Content-Type", "application/json"}, who...)...)
	}
	wantIdentityUnavailable(t, "limited route, IdP down", limited(alice))
	if r := limited(bob); r.status != 429 {
		t.Errorf("a second identity from one address while the IdP is down = %v; want 429 (counted per address)", r)
	}
	if n := ups.count("/orders", "o-1") + ups.count("/limited", "l-1"); n != 0 {
		t.Fatalf("the upstream ran %d writes whose identity was not checked", n)
	}

	up.Store(true)
	var r httpAnswer
	testutil.Eventually(t, 10*time.Second, "the write to go through after the IdP came up", func() bool {
		r = order(t, base, "o-1", alice...)
		return r.status != 503
	})
	if r.status != 201 || ups.count("/orders", "o-1") != 1 {
		t.Fatalf("after the IdP came up = %v, executions %d; want 201, 1", r, ups.count("/orders", "o-1"))
	}
	// Verified identities count per identity again.
	if r := limited(alice); r.status != 201 {
		t.Errorf("limited route after the keys loaded = %v; want 201 (a budget of alice's own)", r)
	}
	if r := order(t, base, "o-2", bearer(token(t, otherRSA1, claimsAt("alice", t0)))...); r.status != 401 || r.header.Get("WWW-Authenticate") != `Bearer error="invalid_token"` {
		t.Errorf("a forged token once the keys loaded = %v; want 401 invalid_token", r)
	}
	n := gets.Load()
	if r := order(t, base, "o-3", bearer(token(t, signKey{"random-kid", jose.RS256, otherRSA1.priv}, claimsAt("mallory", t0)))...); r.status != 401 {
		t.Errorf("an unknown kid once the keys loaded = %v; want 401", r)
	}
	if gets.Load() != n {
		t.Errorf("an unknown kid right after the load fetched the set %d times; want 0 (rate-limited)", gets.Load()-n)
	}
}

// TestIdentityJWKSURLSlow (issue 28, item 4): a JWK Set URL that does not
// answer. A valid token's keyed write gets 503 idempotency_unavailable
// within about a second (the bound a request waits for a fetch), not after
// the fetch's 10s timeout, and never 401; once the IdP answers, it runs.
func TestIdentityJWKSURLSlow(t *testing.T) {
	t.Parallel()
	signKeys(t)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	var gets atomic.Int32
	set := jwksOf(t, rsa1)
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gets.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Write(set)
	}))
	t.Cleanup(idp.Close)
	ups := newCountingUpstream(t)
	base, _ := identityApp(t, jwksOutageYAML(ups.URL, idp.URL+"/jwks.json"), testutil.NewClock(t0))
	alice := bearer(token(t, rsa1, claimsAt("alice", t0)))
	for i := range 3 {
		start := time.Now()
		r := order(t, base, "s-1", alice...)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("write %d during a hung JWK Set fetch took %v; want about 1s", i, d)
		}
		wantIdentityUnavailable(t, "IdP hung", r)
	}
	if gets.Load() != 1 || ups.count("/orders", "s-1") != 0 {
		t.Errorf("%d fetches, %d executions; want 1 (shared), 0", gets.Load(), ups.count("/orders", "s-1"))
	}
	free()
	var r httpAnswer
	testutil.Eventually(t, 10*time.Second, "the write to go through after the IdP answered", func() bool {
		r = order(t, base, "s-1", alice...)
		return r.status != 503
	})
	if r.status != 201 {
		t.Errorf("after the IdP answered = %v; want 201", r)
	}
}

// TestIdentityCookies: a cookie identity scopes Alice and Bob apart, and a
// keyed write without any identity gets 400 (require_identity's default).
func TestIdentityCookies(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	base, _ := identityApp(t, orderYAML(up.URL, `    cookies: ["sid"]`), testutil.NewClock(t0))
	a := order(t, base, "order-123", "Cookie", "sid=alice")
	b := order(t, base, "order-123", "Cookie", "theme=dark; sid=bob")
	if a.status != 201 || b.status != 201 || a.body == b.body || b.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("alice and bob, one key = %v / %v; want two executions", a, b)
	}
	if r := order(t, base, "order-123", "Cookie", "sid=alice"); r.body != a.body || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("alice's retry = %v; want her answer replayed", r)
	}
	if n := up.count("/orders", "order-123"); n != 2 {
		t.Errorf("upstream ran order-123 %d times; want 2", n)
	}
	// The raw Authorization header is no identity once cookies are chosen.
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer x"}, {"Cookie", "sid="}} {
		if r := order(t, base, "anon", hdr...); r.status != 400 || !strings.Contains(r.body, `"idempotency_identity_missing"`) {
			t.Errorf("%q: %v; want 400 idempotency_identity_missing", hdr, r)
		}
	}
	if n := up.count("/orders", "anon"); n != 0 {
		t.Errorf("upstream ran a write without identity %d times", n)
	}
}

// TestIdentityRateLimitBy: a route limit by identity gives each verified
// identity its own budget, whatever its address, and shares it across
// addresses; a request without a verified identity counts per address.
// A limit by header counts per header value.
func TestIdentityRateLimitBy(t *testing.T) {
	t.Parallel()
	testRateLimitBy(t, "")
}

// TestIdentityRateLimitByRedis: the same with limiter.backend redis, two
// replicas sharing the budgets.
func TestIdentityRateLimitByRedis(t *testing.T) {
	t.Parallel()
	testRateLimitBy(t, `
limiter: {backend: redis}
store: {redis: {addrs: ["`+redistest.Addr(t)+`"], key_prefix: "`+redistest.Prefix(t)+`"}}`)
}

func testRateLimitBy(t *testing.T, limiterYAML string) {
	signKeys(t)
	up := newCountingUpstream(t)
	jwks := filepath.Join(t.TempDir(), "jwks.json")
	writeAtomic(t, jwks, jwksOf(t, rsa1))
	clk := testutil.NewClock(t0)
	yaml := `
upstream: {url: "` + up.URL + `"}
edge_limit: {rate: 0}
client_ip: {trusted_proxies: ["127.0.0.1/32", "::1/128"]}
idempotency:
  identity: {jwt: {jwks_file: "` + jwks + `"}}
routes:
  - {name: by_id, method: GET, path: /by-id, rate_limit: {requests: 2, per: 1h, algorithm: window, by: identity}}
  - {name: by_key, method: GET, path: /by-key, rate_limit: {requests: 2, per: 1h, algorithm: window, by: "header:X-Api-Key"}}
` + limiterYAML
	// With Redis, two replicas alternate: the budgets are shared.
	bases := []string{}
	for range 1 + min(1, len(limiterYAML)) {
		b, _ := identityApp(t, yaml, clk)
		bases = append(bases, b)
	}
	n := 0
	alice := bearer(token(t, rsa1, claimsAt("alice", t0)))
	aliceRefreshed := bearer(token(t, rsa1, claimsAt("alice", t0.Add(time.Second))))
	bob := bearer(token(t, rsa1, claimsAt("bob", t0)))
	// The upstream answers 201 to whatever passes.
	get := func(path, from string, hdr ...string) int {
		n++
		return doHTTP(t, http.DefaultClient, "GET", bases[n%len(bases)]+path, "", append([]string{"X-Forwarded-For", from}, hdr...)...).status
	}
	steps := []struct {
		name, path, from string
		hdr              []string
		want             int
	}{
		// Two identities from one address: a budget each.
		{"alice 1", "/by-id", "198.51.100.1", alice, 201},
		{"alice 2, refreshed token", "/by-id", "198.51.100.1", aliceRefreshed, 201},
		{"bob 1, alice's address", "/by-id", "198.51.100.1", bob, 201},
		{"bob 2", "/by-id", "198.51.100.1", bob, 201},
		// One identity from two addresses: one budget, spent.
		{"alice 3, another address", "/by-id", "203.0.113.9", alice, 429},
		{"bob 3, another address", "/by-id", "203.0.113.9", bob, 429},
		// Random or missing tokens count per address: the first address's
		// own budget, untouched so far, then spent.
		{"garbage token 1", "/by-id", "198.51.100.1", bearer("random-1"), 201},
		{"garbage token 2", "/by-id", "198.51.100.1", bearer("random-2"), 201},
		{"garbage token 3", "/by-id", "198.51.100.1", bearer("random-3"), 429},
		{"no token", "/by-id", "198.51.100.1", nil, 429},
		{"no token, another address", "/by-id", "192.0.2.7", nil, 201},
		// By header: per value, across addresses; without it, per address.
		{"key a 1", "/by-key", "198.51.100.1", []string{"X-Api-Key", "a"}, 201},
		{"key a 2", "/by-key", "203.0.113.9", []string{"X-Api-Key", "a"}, 201},
		{"key a 3", "/by-key", "192.0.2.7", []string{"X-Api-Key", "a"}, 429},
		{"key b 1", "/by-key", "198.51.100.1", []string{"X-Api-Key", "b"}, 201},
		{"no key", "/by-key", "198.51.100.1", nil, 201},
	}
	for _, s := range steps {
		if got := get(s.path, s.from, s.hdr...); got != s.want {
			t.Errorf("%s: %d; want %d", s.name, got, s.want)
		}
	}
}

// TestIdentityReload: a reload that changes the identity's sources and
// require_identity applies them without a restart, through the builder
// New uses; the old resolver is closed.
func TestIdentityReload(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	path := filepath.Join(t.TempDir(), "c.yaml")
	v1 := orderYAML(up.URL, `    headers: ["X-Api-Key"]`)
	if err := os.WriteFile(path, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	oa := startOpsApp(t, v1, path, nil)
	if r := order(t, oa.base, "r-1", "Cookie", "sid=alice"); r.status != 400 {
		t.Fatalf("a cookie before the reload = %v; want 400 (the identity is X-Api-Key)", r)
	}
	testutil.Eventually(t, 10*time.Second, "watcher started", func() bool { oa.reload.mu.Lock(); defer oa.reload.mu.Unlock(); return oa.reload.started })
	writeAtomic(t, path, []byte(orderYAML(up.URL, `    cookies: ["sid"]`)))
	testutil.Eventually(t, 10*time.Second, "cookie identity", func() bool { return order(t, oa.base, "r-2", "Cookie", "sid=alice").status == 201 })
	if r := order(t, oa.base, "r-3", "X-Api-Key", "k1"); r.status != 400 {
		t.Errorf("the old identity header after the reload = %v; want 400", r)
	}
	if strings.Contains(oa.logs.String(), "need a restart") {
		t.Errorf("an identity change was logged as needing a restart:\n%s", oa.logs.String())
	}
	// Anonymous from now on.
	writeAtomic(t, path, []byte(strings.Replace(orderYAML(up.URL, `    cookies: ["sid"]`), "idempotency:\n", "idempotency:\n  require_identity: false\n", 1)))
	testutil.Eventually(t, 10*time.Second, "require_identity false", func() bool { return order(t, oa.base, "r-4").status == 201 })
}
