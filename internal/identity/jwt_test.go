package identity_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/idemgate/idemgate/internal/identity"
)

// TestJWT is the table of DESIGN.md's edge cases: each token either
// verifies (and then has the identity of sub "alice" or another) or is
// refused with a given reason.
func TestJWT(t *testing.T) {
	t.Parallel()
	keys(t)
	exp := func(d time.Duration) string { return fmt.Sprintf(`"exp":%d`, t0.Add(d).Unix()) }
	base := func(sub string, extra ...string) string {
		s := fmt.Sprintf(`{"iss":"https://idp.example","sub":%q`, sub)
		for _, e := range extra {
			s += "," + e
		}
		return s + "}"
	}
	alice := sign(t, rsaA, true, claims("alice"))
	tests := []struct {
		name string
		mod  func(*identity.JWTOptions)
		tok  string
		want error  // nil: verifies
		same string // when verifying: a token with the same identity; "!" + token: a different one
	}{
		{name: "RS256 with kid", tok: alice},
		{name: "refreshed token, same claims", tok: sign(t, rsaA, true, claims("alice", `"jti":"2"`)), same: alice},
		{name: "other sub", tok: sign(t, rsaA, true, claims("bob")), same: "!" + alice},
		{name: "EdDSA", tok: sign(t, edA, true, claims("alice")), same: alice},
		{name: "ES256", tok: sign(t, ecA, true, claims("alice")), same: alice},
		{name: "no kid tries every fitting key", tok: sign(t, rsaB, false, claims("alice")), same: alice},
		{name: "no kid EdDSA", tok: sign(t, edA, false, claims("alice")), same: alice},
		{name: "expired within leeway", tok: sign(t, rsaA, true, base("alice", exp(-29*time.Second)))},
		{name: "expired past leeway", tok: sign(t, rsaA, true, base("alice", exp(-31*time.Second))), want: identity.ErrExpired},
		{name: "expired, no leeway", mod: func(o *identity.JWTOptions) { o.Leeway = 0 }, tok: sign(t, rsaA, true, base("alice", exp(0))), want: identity.ErrExpired},
		{name: "exp missing", tok: sign(t, rsaA, true, base("alice")), want: identity.ErrClaimMissing},
		{name: "exp a string", tok: sign(t, rsaA, true, base("alice", `"exp":"9999999999"`)), want: identity.ErrMalformed},
		{name: "exp fractional", tok: sign(t, rsaA, true, base("alice", fmt.Sprintf(`"exp":%d.5`, t0.Add(time.Minute).Unix())))},
		{name: "nbf in the future", tok: sign(t, rsaA, true, base("alice", exp(time.Hour), fmt.Sprintf(`"nbf":%d`, t0.Add(time.Minute).Unix()))), want: identity.ErrNotYetValid},
		{name: "nbf within leeway", tok: sign(t, rsaA, true, base("alice", exp(time.Hour), fmt.Sprintf(`"nbf":%d`, t0.Add(20*time.Second).Unix())))},
		{name: "iat in the future", tok: sign(t, rsaA, true, base("alice", exp(time.Hour), fmt.Sprintf(`"iat":%d`, t0.Add(time.Minute).Unix()))), want: identity.ErrNotYetValid},
		{name: "alg none", tok: b64(`{"alg":"none","typ":"JWT"}`) + "." + b64(claims("alice")) + ".", want: identity.ErrMalformed},
		{name: "alg none with a signature", tok: b64(`{"alg":"none","kid":"rsa-a"}`) + "." + b64(claims("alice")) + "." + b64("x"), want: identity.ErrAlgorithm},
		{name: "signed by another key, same kid", tok: sign(t, testKey{"rsa-a", jose.RS256, rsaB.priv}, true, claims("alice")), want: identity.ErrSignature},
		{name: "signed by a key not in the set", tok: sign(t, testKey{"rsa-x", jose.RS256, rsaB.priv}, true, claims("alice")), want: identity.ErrUnknownKey},
		{name: "no kid, no key verifies", tok: sign(t, testKey{"", jose.ES256, mustEC(t)}, false, claims("alice")), want: identity.ErrSignature},
		{name: "alg not allowed", tok: sign(t, testKey{"rsa-a", jose.RS384, rsaA.priv}, true, claims("alice")), want: identity.ErrAlgorithm},
		{name: "alg allowed but not the key's type", tok: sign(t, testKey{"rsa-a", jose.ES256, ecA.priv}, true, claims("alice")), want: identity.ErrUnknownKey},
		{name: "PS256 with an RS256 JWK", mod: func(o *identity.JWTOptions) { o.Algorithms = []string{"RS256", "PS256"} }, tok: sign(t, testKey{"rsa-a", jose.PS256, rsaA.priv}, true, claims("alice")), want: identity.ErrUnknownKey},
		{name: "HS256 signed with the RSA public key", tok: hs256(t, rsaPubBytes(t), `{"alg":"HS256","kid":"rsa-a"}`, claims("alice")), want: identity.ErrAlgorithm},
		{name: "wrong issuer", mod: issuers("https://other.example"), tok: alice, want: identity.ErrIssuer},
		{name: "issuer one of two", mod: issuers("https://other.example", "https://idp.example"), tok: alice},
		{name: "issuer not a string", mod: issuers("1"), tok: sign(t, rsaA, true, `{"iss":1,"sub":"alice",`+exp(time.Hour)+`}`), want: identity.ErrIssuer},
		{name: "wrong audience", mod: audiences("shop"), tok: sign(t, rsaA, true, claims("alice", `"aud":"other"`)), want: identity.ErrAudience},
		{name: "audience string", mod: audiences("shop"), tok: sign(t, rsaA, true, claims("alice", `"aud":"shop"`)), same: sign(t, rsaA, true, claims("alice", `"aud":["shop"]`))},
		{name: "audience array, one match", mod: audiences("shop", "admin"), tok: sign(t, rsaA, true, claims("alice", `"aud":["x","admin"]`)), same: sign(t, rsaA, true, claims("alice", `"aud":"shop"`))},
		{name: "audience array, no match", mod: audiences("shop"), tok: sign(t, rsaA, true, claims("alice", `"aud":["x","y"]`)), want: identity.ErrAudience},
		{name: "audience missing", mod: audiences("shop"), tok: alice, want: identity.ErrAudience},
		{name: "audience array of numbers", mod: audiences("1"), tok: sign(t, rsaA, true, claims("alice", `"aud":[1]`)), want: identity.ErrAudience},
		{name: "configured claim missing", mod: claimNames("iss", "sub", "tenant"), tok: alice, want: identity.ErrClaimMissing},
		{name: "configured claim null", tok: sign(t, rsaA, true, `{"iss":"https://idp.example","sub":null,`+exp(time.Hour)+`}`), want: identity.ErrClaimMissing},
		{name: "number and string sub differ", tok: sign(t, rsaA, true, `{"iss":"https://idp.example","sub":1,`+exp(time.Hour)+`}`),
			same: "!" + sign(t, rsaA, true, `{"iss":"https://idp.example","sub":"1",`+exp(time.Hour)+`}`)},
		{name: "escapes and order do not matter", tok: sign(t, rsaA, true, `{"sub":"\u0061lice",`+exp(time.Hour)+`, "iss" : "https:\/\/idp.example"}`), same: alice},
		{name: "object claim canonical", mod: claimNames("org"), tok: sign(t, rsaA, true, `{"org":{"b":1,"a":[true,null]},`+exp(time.Hour)+`}`),
			same: sign(t, rsaA, true, `{"org":{"a":[true,null],"b":1},`+exp(time.Hour)+`}`)},
		{name: "duplicate claim names", tok: sign(t, rsaA, true, `{"iss":"https://idp.example","sub":"bob","sub":"alice",`+exp(time.Hour)+`}`), want: identity.ErrMalformed},
		{name: "payload not an object", tok: sign(t, rsaA, true, `["alice"]`), want: identity.ErrMalformed},
		{name: "payload not JSON", tok: sign(t, rsaA, true, `alice`), want: identity.ErrMalformed},
		{name: "two segments", tok: b64(`{"alg":"RS256"}`) + "." + b64(claims("alice")), want: identity.ErrMalformed},
		{name: "tampered payload", tok: tamper(alice), want: identity.ErrSignature},
		{name: "signature re-spelled (unused bits set)", tok: respell(alice), want: identity.ErrMalformed},
		{name: "padded segment", tok: alice + "=", want: identity.ErrMalformed},
		{name: "empty signature", tok: alice[:strings.LastIndexByte(alice, '.')+1], want: identity.ErrMalformed},
		{name: "JSON serialization", tok: `{"payload":"x"}`, want: identity.ErrMalformed},
		{name: "too long", tok: strings.Repeat("a", 17<<10) + ".b.c", want: identity.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, _, _ := fileResolver(t, tt.mod, rsaA, rsaB, edA, ecA)
			res := r.Resolve(bearerReq(tt.tok))
			if tt.want != nil {
				if res.Status != identity.Invalid || !errors.Is(res.Err, tt.want) || !errors.Is(res.Err, identity.ErrInvalid) {
					t.Fatalf("Resolve = %v, %v; want invalid with %v", res.Status, res.Err, tt.want)
				}
				if strings.Contains(res.Err.Error(), "alice") || strings.Contains(res.Err.Error(), tt.tok[:min(len(tt.tok), 20)]) {
					t.Errorf("error %q holds a claim or token value", res.Err)
				}
				return
			}
			if res.Status != identity.Present || !res.Verified || res.Err != nil {
				t.Fatalf("Resolve = %v, verified %v, %v; want present and verified", res.Status, res.Verified, res.Err)
			}
			if tt.same == "" {
				return
			}
			other, want := tt.same, true
			if o, ok := strings.CutPrefix(tt.same, "!"); ok {
				other, want = o, false
			}
			res2 := r.Resolve(bearerReq(other))
			if res2.Status != identity.Present {
				t.Fatalf("Resolve(other) = %v, %v; want present", res2.Status, res2.Err)
			}
			if got := identity.ScopeKey("", res, "k") == identity.ScopeKey("", res2, "k"); got != want {
				t.Errorf("same scope = %v; want %v", got, want)
			}
		})
	}
}

func issuers(s ...string) func(*identity.JWTOptions) {
	return func(o *identity.JWTOptions) { o.Issuers = s }
}

func audiences(s ...string) func(*identity.JWTOptions) {
	return func(o *identity.JWTOptions) { o.Audiences = s }
}

func claimNames(s ...string) func(*identity.JWTOptions) {
	return func(o *identity.JWTOptions) { o.Claims = s }
}

func mustEC(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// tamper changes the payload's sub without re-signing.
func tamper(tok string) string {
	parts := strings.Split(tok, ".")
	p, _ := base64.RawURLEncoding.DecodeString(parts[1])
	parts[1] = b64(strings.Replace(string(p), "alice", "admin", 1))
	return strings.Join(parts, ".")
}

// respell sets the unused low bits of the signature's last character:
// lenient base64 decoders read the same bytes.
func respell(tok string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	last := strings.IndexByte(alphabet, tok[len(tok)-1])
	return tok[:len(tok)-1] + string(alphabet[last|1])
}

// hs256 signs header.payload with HMAC-SHA256 by hand.
func hs256(t testing.TB, secret []byte, header, payload string) string {
	t.Helper()
	in := b64(header) + "." + b64(payload)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// rsaPubBytes is the public key as an algorithm-confusion attacker would use
// it for an HMAC secret.
func rsaPubBytes(t testing.TB) []byte {
	t.Helper()
	b, err := x509.MarshalPKIXPublicKey(rsaA.priv.Public())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHMAC(t *testing.T) {
	t.Parallel()
	keys(t)
	secret := []byte("0123456789abcdef0123456789abcdef")
	clk := newClock()
	r, err := identity.New(identity.Options{Now: clk.Now, JWT: &identity.JWTOptions{HMACSecret: secret, Algorithms: []string{"HS256"}, Leeway: 30 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tests := []struct {
		name string
		tok  string
		want error
	}{
		{"HS256", hs256(t, secret, `{"alg":"HS256","typ":"JWT"}`, claims("alice")), nil},
		{"HS256 with any kid", hs256(t, secret, `{"alg":"HS256","kid":"whatever"}`, claims("alice")), nil},
		{"other secret", hs256(t, []byte("another secret of thirty-two byte"), `{"alg":"HS256"}`, claims("alice")), identity.ErrSignature},
		{"HS512 not allowed", hs512(secret, claims("alice")), identity.ErrAlgorithm},
		{"RS256 not allowed", sign(t, rsaA, true, claims("alice")), identity.ErrAlgorithm},
	}
	for _, tt := range tests {
		res := r.Resolve(bearerReq(tt.tok))
		if tt.want == nil && (res.Status != identity.Present || !res.Verified) {
			t.Errorf("%s: Resolve = %v, %v; want present", tt.name, res.Status, res.Err)
		}
		if tt.want != nil && !errors.Is(res.Err, tt.want) {
			t.Errorf("%s: Resolve = %v, %v; want %v", tt.name, res.Status, res.Err, tt.want)
		}
	}
}

func hs512(secret []byte, payload string) string {
	in := b64(`{"alg":"HS512"}`) + "." + b64(payload)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(in))
	return in + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// TestTokenSources covers where a token comes from: the Authorization
// header's Bearer scheme, another header, a cookie; empty is no identity,
// anything else that is not one token is invalid.
func TestTokenSources(t *testing.T) {
	t.Parallel()
	keys(t)
	tok := sign(t, edA, true, claims("alice"))
	type src = func(*identity.JWTOptions)
	tests := []struct {
		name   string
		mod    src
		h      http.Header
		status identity.Status
	}{
		{"no header", nil, http.Header{}, identity.Empty},
		{"empty header", nil, http.Header{"Authorization": {""}}, identity.Empty},
		{"bearer", nil, http.Header{"Authorization": {"Bearer " + tok}}, identity.Present},
		{"bearer lower case, spaces", nil, http.Header{"Authorization": {"bearer   " + tok}}, identity.Present},
		{"Basic", nil, http.Header{"Authorization": {"Basic YWxpY2U6cHc="}}, identity.Invalid},
		{"bare token in Authorization", nil, http.Header{"Authorization": {tok}}, identity.Invalid},
		{"Bearer alone", nil, http.Header{"Authorization": {"Bearer"}}, identity.Invalid},
		{"two Authorization headers", nil, http.Header{"Authorization": {"Bearer " + tok, "Bearer " + tok}}, identity.Invalid},
		{"other header, bare", func(o *identity.JWTOptions) { o.Header = "x-id-token" }, http.Header{"X-Id-Token": {tok}}, identity.Present},
		{"other header, bearer", func(o *identity.JWTOptions) { o.Header = "X-Id-Token" }, http.Header{"X-Id-Token": {"Bearer " + tok}}, identity.Present},
		{"other header, Authorization ignored", func(o *identity.JWTOptions) { o.Header = "X-Id-Token" }, http.Header{"Authorization": {"Bearer " + tok}}, identity.Empty},
		{"cookie", func(o *identity.JWTOptions) { o.Cookie = "at" }, http.Header{"Cookie": {"theme=x; at=" + tok}}, identity.Present},
		{"empty cookie", func(o *identity.JWTOptions) { o.Cookie = "at" }, http.Header{"Cookie": {"at="}}, identity.Empty},
		{"two cookies", func(o *identity.JWTOptions) { o.Cookie = "at" }, http.Header{"Cookie": {"at=" + tok + "; at=" + tok}}, identity.Invalid},
		{"garbage cookie", func(o *identity.JWTOptions) { o.Cookie = "at" }, http.Header{"Cookie": {"at=abc"}}, identity.Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, _, _ := fileResolver(t, tt.mod, edA)
			res := r.Resolve(&http.Request{Header: tt.h})
			if res.Status != tt.status {
				t.Errorf("Resolve = %v, %v; want %v", res.Status, res.Err, tt.status)
			}
			if res.Verified != (tt.status == identity.Present) {
				t.Errorf("Verified = %v; want %v", res.Verified, tt.status == identity.Present)
			}
		})
	}
}

// TestJWTWithCookieSource: a JWT identity beside a cookie source; the
// token's refresh keeps the scope, the cookie's change does not, and a bad
// token is invalid whatever the cookie.
func TestJWTWithCookieSource(t *testing.T) {
	t.Parallel()
	keys(t)
	path := t.TempDir() + "/jwks.json"
	writeFile(t, path, jwks(t, rsaA))
	clk := newClock()
	r, err := identity.New(identity.Options{Cookies: []string{"sid"}, Now: clk.Now, JWT: &identity.JWTOptions{JWKSFile: path}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	req := func(tok, sid string) identity.Result {
		q := bearerReq(tok)
		if sid != "" {
			q.Header.Set("Cookie", "sid="+sid)
		}
		return r.Resolve(q)
	}
	t1 := sign(t, rsaA, true, claims("alice"))
	t2 := sign(t, rsaA, true, claims("alice", `"jti":"2"`))
	a, b, c := req(t1, "s1"), req(t2, "s1"), req(t1, "s2")
	if identity.ScopeKey("", a, "k") != identity.ScopeKey("", b, "k") {
		t.Errorf("a refreshed token changed the scope")
	}
	if identity.ScopeKey("", a, "k") == identity.ScopeKey("", c, "k") {
		t.Errorf("another cookie kept the scope")
	}
	if res := req("x.y.z", "s1"); res.Status != identity.Invalid {
		t.Errorf("bad token with a cookie = %v; want invalid", res.Status)
	}
	if res := req("", "s1"); res.Status != identity.Present || res.Verified {
		t.Errorf("cookie alone = %v verified %v; want present, not verified", res.Status, res.Verified)
	}
	// Lookup by claims and cookie finds the same scope.
	hdr := http.Header{"Cookie": {"sid=s1"}}
	look, err := r.Lookup(hdr, map[string]json.RawMessage{"iss": json.RawMessage(`"https://idp.example"`), "sub": json.RawMessage(`"alice"`)})
	if err != nil || identity.ScopeKey("", look, "k") != identity.ScopeKey("", a, "k") {
		t.Errorf("Lookup = %v; want the token's scope", err)
	}
}

// TestCacheConcurrent: many goroutines resolving one token at once agree,
// and every call is counted as a hit or a miss.
func TestCacheConcurrent(t *testing.T) {
	t.Parallel()
	keys(t)
	r, _, _ := fileResolver(t, nil, edA)
	tok := sign(t, edA, true, claims("alice"))
	want := r.Resolve(bearerReq(tok)).Sum()
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			res := r.Resolve(bearerReq(tok))
			if res.Status != identity.Present || res.Sum() != want {
				errs <- fmt.Errorf("Resolve = %v, %v", res.Status, res.Err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st := r.Stats()
	if st.CacheHits != n || st.CacheMisses != 1 || st.CacheEntries != 1 {
		t.Errorf("stats = %+v; want %d hits, 1 miss, 1 entry", st, n)
	}
}

func TestCacheBoundedAndExpiring(t *testing.T) {
	t.Parallel()
	keys(t)
	r, clk, _ := fileResolver(t, func(o *identity.JWTOptions) { o.CacheSize = 4 }, edA)
	for i := range 10 {
		if res := r.Resolve(bearerReq(sign(t, edA, true, claims(fmt.Sprint("u", i))))); res.Status != identity.Present {
			t.Fatalf("Resolve = %v", res.Err)
		}
		if n := r.Stats().CacheEntries; n > 4 {
			t.Fatalf("cache holds %d entries; want at most 4", n)
		}
	}
	// A token cached until exp (+ leeway) stops verifying after it.
	tok := sign(t, edA, true, fmt.Sprintf(`{"iss":"i","sub":"s","exp":%d}`, t0.Add(time.Minute).Unix()))
	if res := r.Resolve(bearerReq(tok)); res.Status != identity.Present {
		t.Fatalf("Resolve = %v", res.Err)
	}
	clk.Advance(time.Minute + 29*time.Second)
	if res := r.Resolve(bearerReq(tok)); res.Status != identity.Present {
		t.Fatalf("within leeway: Resolve = %v", res.Err)
	}
	clk.Advance(time.Second)
	if res := r.Resolve(bearerReq(tok)); !errors.Is(res.Err, identity.ErrExpired) {
		t.Errorf("past exp+leeway: Resolve = %v, %v; want expired", res.Status, res.Err)
	}
}
