package proxy

import (
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

var testHMACSecret = []byte("0123456789abcdef0123456789abcdef")

// hmacResolver is a JWT identity verified with testHMACSecret.
func hmacResolver(t *testing.T) *identity.Resolver {
	t.Helper()
	r, err := identity.New(identity.Options{JWT: &identity.JWTOptions{HMACSecret: testHMACSecret, Algorithms: []string{"HS256"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// hmacToken is a Bearer value for sub, signed with secret.
func hmacToken(t *testing.T, secret []byte, sub string) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.HS256, Key: secret}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.Sign(fmt.Appendf(nil, `{"iss":"https://idp.example","sub":%q,"exp":%d}`, sub, time.Now().Add(time.Hour).Unix()))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + tok
}

// TestScopeKeyUnchanged: with the header identity a keyed write's record
// lies under the same store key as before package identity existed
// (keystore's fixture: "v1", tenant "", one Authorization value, the key).
func TestScopeKeyUnchanged(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, nil)
	if r := tp.do(t, "POST", "/ucp/v1/carts", "order-7", `{}`, "Authorization", "Bearer abc"); r.status != 201 {
		t.Fatalf("write = %v", r)
	}
	b, _ := hex.DecodeString("1a29fee9030f4af6ac19acd878d7afa0a28ef402c41f8478fa05d0b27caca871")
	var k keystore.Key
	copy(k[:], b)
	if _, err := tp.store.Get(t.Context(), k); err != nil {
		t.Errorf("the record is not under the first release's key: %v", err)
	}
	if got := scopeKey(tp.p, "", http.Header{"Authorization": {"Bearer abc"}}, "order-7"); got != k {
		t.Errorf("ScopeKey = %s; want %s", got, k)
	}
}

// TestIdentityInvalid: a keyed write whose token does not verify gets 401
// with WWW-Authenticate and nothing runs; the checks come in DESIGN.md's
// order (key syntax, then identity, then body); observe mode forwards it
// unclaimed; GraphQL routes answer in their shape.
func TestIdentityInvalid(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	routes := append([]Route{
		{Name: "observed", Method: "POST", Path: "/observed", Idempotent: true, Observe: true},
		{Name: "graphql", Method: "POST", Path: "/graphql", Idempotent: true, Protocol: ProtocolGraphQL},
	}, defaultRoutes...)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = routes
		o.Stages.Identity = hmacResolver(t)
		o.Stages.RequireIdentity = true
		o.Idempotency.MaxBodyBytes = 32
	})
	alice := hmacToken(t, testHMACSecret, "alice")
	forged := hmacToken(t, []byte("another-secret-another-secret-!!"), "alice")
	big := strings.Repeat("x", 64)
	tests := []struct {
		name, path, key, body string
		hdr                   []string
		status                int
		code                  string
	}{
		{"valid", "/ucp/v1/carts", "k1", `{}`, []string{"Authorization", alice}, 201, ""},
		{"forged", "/ucp/v1/carts", "k2", `{}`, []string{"Authorization", forged}, 401, "idempotency_identity_invalid"},
		{"forged, bad key first", "/ucp/v1/carts", "bad key", `{}`, []string{"Authorization", forged}, 400, "idempotency_key_invalid"},
		{"forged, body too large: identity first", "/ucp/v1/carts", "k3", big, []string{"Authorization", forged}, 401, "idempotency_identity_invalid"},
		{"none, body too large: identity first", "/ucp/v1/carts", "k4", big, nil, 400, "idempotency_identity_missing"},
		{"forged, no key: unprotected", "/ucp/v1/carts", "", `{}`, []string{"Authorization", forged}, 201, ""},
		{"two tokens", "/ucp/v1/carts", "k5", `{}`, []string{"Authorization", alice, "Authorization", alice}, 401, "idempotency_identity_invalid"},
	}
	for _, tt := range tests {
		before := up.total.Load()
		r := tp.do(t, "POST", tt.path, tt.key, tt.body, tt.hdr...)
		if r.status != tt.status || (tt.code != "" && problemCode(t, r) != tt.code) {
			t.Errorf("%s: %v; want %d %s", tt.name, r, tt.status, tt.code)
		}
		if auth := r.header.Get("WWW-Authenticate"); (r.status == 401) != (auth == identity.WWWAuthenticate) {
			t.Errorf("%s: WWW-Authenticate %q with status %d", tt.name, auth, r.status)
		}
		if ran := up.total.Load() - before; (tt.status == 201) != (ran == 1) {
			t.Errorf("%s: the upstream ran %d times", tt.name, ran)
		}
	}
	// Observe mode: forwarded unclaimed, would_reject in the log, no 401.
	if r := tp.do(t, "POST", "/observed", "o1", `{}`, "Authorization", forged); r.status != 201 || r.header.Get("WWW-Authenticate") != "" {
		t.Errorf("observed forged token = %v; want it forwarded", r)
	}
	if !strings.Contains(tp.logs.String(), `"outcome":"would_reject"`) || !strings.Contains(tp.logs.String(), `"outcome":"identity_invalid"`) {
		t.Errorf("outcomes identity_invalid and would_reject not logged:\n%s", tp.logs.String())
	}
	// GraphQL: a mutation with a forged token, in the errors shape.
	r := tp.do(t, "POST", "/graphql", "g1", `{"query":"mutation{pay}"}`, "Authorization", forged)
	if r.status != 401 || !strings.Contains(string(r.body), "idempotency_identity_invalid") || r.header.Get("WWW-Authenticate") == "" {
		t.Errorf("graphql mutation with a forged token = %v %v", r, r.header)
	}
	for _, s := range []string{strings.TrimPrefix(alice, "Bearer "), strings.TrimPrefix(forged, "Bearer ")} {
		if strings.Contains(tp.logs.String(), s[:20]) {
			t.Errorf("a token reached the log")
		}
	}
}

// TestCookieIdentityCrossClient: with the identity {cookies: [sid],
// headers: [X-Shop]}, a session cookie net/http's parser drops (JSON,
// backslashes, non-ASCII...) stays in the identity, read byte for byte, so
// a client without it never gets its owner's answer; a cookie whose end or
// name upstreams read differently gets 400 request_invalid and nothing
// runs. Before the raw cookie reader, Bob got Alice's answer.
func TestCookieIdentityCrossClient(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	res, err := identity.New(identity.Options{Headers: []string{"X-Shop"}, Cookies: []string{"sid"}})
	if err != nil {
		t.Fatal(err)
	}
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Identity = res
		o.Stages.RequireIdentity = true
	})
	for i, sid := range []string{`{"u":1}`, `a\b`, "élan", "\xff\xfe", "a b", `a"b`} {
		key := fmt.Sprintf("k%d", i)
		alice := tp.do(t, "POST", "/ucp/v1/carts", key, `{}`, "X-Shop", "s1", "Cookie", "sid="+sid)
		if alice.status != 201 {
			t.Fatalf("sid=%q: Alice's write = %v", sid, alice)
		}
		again := tp.do(t, "POST", "/ucp/v1/carts", key, `{}`, "X-Shop", "s1", "Cookie", "sid="+sid)
		if again.header.Get("Idempotent-Replayed") != "true" || string(again.body) != string(alice.body) {
			t.Errorf("sid=%q: Alice's retry = %v %v; want her replay", sid, again, again.header)
		}
		bob := tp.do(t, "POST", "/ucp/v1/carts", key, `{}`, "X-Shop", "s1")
		if bob.header.Get("Idempotent-Replayed") != "" || string(bob.body) == string(alice.body) {
			t.Errorf("sid=%q: a client without the cookie got Alice's answer: %v", sid, bob)
		}
	}
	for _, c := range []string{`sid="a;b"`, `sid="alice`, "SID=alice", "%73id=alice"} {
		before := up.total.Load()
		r := tp.do(t, "POST", "/ucp/v1/carts", "u-"+c, `{}`, "X-Shop", "s1", "Cookie", c)
		if r.status != 400 || problemCode(t, r) != "request_invalid" {
			t.Errorf("Cookie %q: %v; want 400 request_invalid", c, r)
		}
		if ran := up.total.Load() - before; ran != 0 {
			t.Errorf("Cookie %q: the upstream ran %d times", c, ran)
		}
	}
	// Unkeyed requests do not need the identity: they pass as before.
	if r := tp.do(t, "POST", "/ucp/v1/carts", "", `{}`, "Cookie", `sid="a;b"`); r.status != 201 {
		t.Errorf("unkeyed write with an unreadable cookie = %v; want it forwarded", r)
	}
	if strings.Contains(tp.logs.String(), "alice") {
		t.Errorf("a cookie value reached the log")
	}
}
