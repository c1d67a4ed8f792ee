package identity_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/idemgate/idemgate/internal/identity"
)

// TestScopeKeyFixtures pins header-only scopes to the store keys the proxy
// made before package identity existed (proxy.(*Proxy).ScopeKey at
// 768a101, printed by a throwaway test): an upgrade must not turn replays
// into new executions.
func TestScopeKeyFixtures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		headers []string
		h       http.Header
		tenant  string
		key     string
		status  identity.Status
		want    string
	}{
		{"bearer", []string{"Authorization"}, http.Header{"Authorization": {"Bearer abc"}}, "", "k-1", identity.Present,
			"0bf31e682106acfaead7ff68b9eb33d84d677364cebeaf606c00c755271d6c85"},
		{"no header", []string{"Authorization"}, http.Header{}, "", "k-1", identity.Empty,
			"8d22118358ca7be80b6e01152fe75c73b5f152e51a41b3ae076845bbacd8b81c"},
		{"empty header is no identity, same bytes", []string{"Authorization"}, http.Header{"Authorization": {""}}, "shop", "k-1", identity.Empty,
			"2997a7d895bf4f68855a0b5ac89f744d095e1bb2a1b1336e347371a9395816be"},
		{"two headers, repeated values", []string{"ucp-agent", "Authorization"},
			http.Header{"Ucp-Agent": {`profile="https://a.example/p"`}, "Authorization": {"Basic x", "Basic y"}}, "t1", "order-123", identity.Present,
			"fb6b22e6bf1da216c0953c6acb86ee6a4c9695f5792e506ef9c20e67e1fd0c86"},
		{"one of two", []string{"Ucp-Agent", "Authorization"}, http.Header{"Authorization": {"Basic x"}}, "t1", "order-123", identity.Present,
			"4db86f891073f80af18b280048d2a9af551fa6d063de3d9642f87f6aa967cf19"},
		{"no source", nil, http.Header{"Authorization": {"Bearer abc"}}, "", "k-1", identity.Empty,
			"af50d7f4605881e01c53d59e99456153283f0d740beb485829455824f436286a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := identity.New(identity.Options{Headers: tt.headers})
			if err != nil {
				t.Fatal(err)
			}
			req := &http.Request{Header: tt.h}
			res := r.Resolve(req)
			if res.Status != tt.status || res.Verified || res.Err != nil {
				t.Errorf("Resolve = %v verified %v err %v; want %v, false, nil", res.Status, res.Verified, res.Err, tt.status)
			}
			if got := identity.ScopeKey(tt.tenant, res, tt.key).String(); got != tt.want {
				t.Errorf("ScopeKey = %s; want %s (today's proxy bytes)", got, tt.want)
			}
			look, err := r.Lookup(tt.h, nil)
			if err != nil || identity.ScopeKey(tt.tenant, look, tt.key).String() != tt.want {
				t.Errorf("Lookup = %v, %v; want the same scope as Resolve", look, err)
			}
			if res.Sum() != look.Sum() {
				t.Errorf("Sum differs between Resolve and Lookup")
			}
		})
	}
}

func TestResolveHeadersCookies(t *testing.T) {
	t.Parallel()
	cookie := func(v string) http.Header { return http.Header{"Cookie": {v}} }
	tests := []struct {
		name      string
		o         identity.Options
		a, b      http.Header
		statusA   identity.Status
		statusB   identity.Status
		sameScope bool
	}{
		{"alice and bob by cookie", identity.Options{Cookies: []string{"sid"}},
			cookie("sid=alice"), cookie("sid=bob"), identity.Present, identity.Present, false},
		{"same cookie, other cookies ignored", identity.Options{Cookies: []string{"sid"}},
			cookie("sid=alice; theme=dark"), cookie("theme=light; sid=alice"), identity.Present, identity.Present, true},
		{"no cookie is empty", identity.Options{Cookies: []string{"sid"}},
			cookie("theme=dark"), http.Header{}, identity.Empty, identity.Empty, true},
		{"empty cookie is empty", identity.Options{Cookies: []string{"sid"}},
			cookie("sid="), http.Header{}, identity.Empty, identity.Empty, true},
		{"header and cookie together", identity.Options{Headers: []string{"X-Api-Key"}, Cookies: []string{"sid"}},
			http.Header{"X-Api-Key": {"k1"}, "Cookie": {"sid=s"}}, http.Header{"X-Api-Key": {"k1"}}, identity.Present, identity.Present, false},
		{"a value moved from header to cookie is another client", identity.Options{Headers: []string{"X-Api-Key"}, Cookies: []string{"sid"}},
			http.Header{"X-Api-Key": {"v"}}, cookie("sid=v"), identity.Present, identity.Present, false},
		{"empty header value skipped with cookies", identity.Options{Headers: []string{"X-Api-Key"}, Cookies: []string{"sid"}},
			http.Header{"X-Api-Key": {""}, "Cookie": {"sid=s"}}, cookie("sid=s"), identity.Present, identity.Present, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := identity.New(tt.o)
			if err != nil {
				t.Fatal(err)
			}
			ra := r.Resolve(&http.Request{Header: tt.a})
			rb := r.Resolve(&http.Request{Header: tt.b})
			if ra.Status != tt.statusA || rb.Status != tt.statusB {
				t.Errorf("statuses = %v, %v; want %v, %v", ra.Status, rb.Status, tt.statusA, tt.statusB)
			}
			ka, kb := identity.ScopeKey("", ra, "k"), identity.ScopeKey("", rb, "k")
			if (ka == kb) != tt.sameScope {
				t.Errorf("same scope = %v; want %v", ka == kb, tt.sameScope)
			}
			la, err := r.Lookup(tt.a, nil)
			if err != nil || identity.ScopeKey("", la, "k") != ka {
				t.Errorf("Lookup(a) = %v; want Resolve's scope", err)
			}
		})
	}
}

// TestScopeFormsNeverCollide: a v2 scope (any source beyond headers) never
// has the parts of a header-only one, whatever the values.
func TestScopeFormsNeverCollide(t *testing.T) {
	t.Parallel()
	legacy, _ := identity.New(identity.Options{Headers: []string{"Authorization"}})
	v2, _ := identity.New(identity.Options{Headers: []string{"Authorization"}, Cookies: []string{"sid"}})
	h := http.Header{"Authorization": {"Bearer abc"}}
	a := legacy.Resolve(&http.Request{Header: h}).AppendScope(nil)
	b := v2.Resolve(&http.Request{Header: h}).AppendScope(nil)
	if len(b) != 2 || b[0] != "identity/v2" || len(b[1]) != 32 {
		t.Fatalf("v2 parts = %q; want the marker and a 32-byte sum", b)
	}
	if a[0] == b[0] {
		t.Errorf("legacy parts start %q like v2's", a[0])
	}
	for _, p := range b {
		if p == "Bearer abc" {
			t.Errorf("v2 parts hold the raw header value")
		}
	}
}

func TestNewRefuses(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	tests := []struct {
		name string
		o    identity.Options
	}{
		{"jwt header also a header source", identity.Options{Headers: []string{"authorization"}, JWT: &identity.JWTOptions{HMACSecret: secret, Algorithms: []string{"HS256"}}}},
		{"jwt cookie also a cookie source", identity.Options{Cookies: []string{"at"}, JWT: &identity.JWTOptions{Cookie: "at", HMACSecret: secret, Algorithms: []string{"HS256"}}}},
		{"no key source", identity.Options{JWT: &identity.JWTOptions{}}},
		{"two key sources", identity.Options{JWT: &identity.JWTOptions{HMACSecret: secret, JWKSURL: "http://127.0.0.1:1/jwks", Algorithms: []string{"HS256"}}}},
		{"hmac without HS", identity.Options{JWT: &identity.JWTOptions{HMACSecret: secret}}},
		{"hmac with RS too", identity.Options{JWT: &identity.JWTOptions{HMACSecret: secret, Algorithms: []string{"HS256", "RS256"}}}},
		{"HS with a JWK Set", identity.Options{JWT: &identity.JWTOptions{JWKSURL: "http://127.0.0.1:1/jwks", Algorithms: []string{"HS256"}}}},
		{"none", identity.Options{JWT: &identity.JWTOptions{HMACSecret: secret, Algorithms: []string{"none"}}}},
		{"short secret", identity.Options{JWT: &identity.JWTOptions{HMACSecret: secret[:31], Algorithms: []string{"HS256"}}}},
		{"short secret for HS512", identity.Options{JWT: &identity.JWTOptions{HMACSecret: secret[:48], Algorithms: []string{"HS512"}}}},
		{"header and cookie", identity.Options{JWT: &identity.JWTOptions{Header: "X-Token", Cookie: "at", HMACSecret: secret, Algorithms: []string{"HS256"}}}},
		{"missing file", identity.Options{JWT: &identity.JWTOptions{JWKSFile: "/nonexistent/jwks.json"}}},
		{"negative leeway", identity.Options{JWT: &identity.JWTOptions{HMACSecret: secret, Algorithms: []string{"HS256"}, Leeway: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := identity.New(tt.o)
			if err == nil {
				r.Close()
				t.Fatalf("New = nil; want an error")
			}
		})
	}
}

func TestLookupClaimsErrors(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef")
	r, err := identity.New(identity.Options{JWT: &identity.JWTOptions{HMACSecret: secret, Algorithms: []string{"HS256"}}})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]map[string]json.RawMessage{
		"missing sub":  {"iss": json.RawMessage(`"a"`)},
		"extra claim":  {"iss": json.RawMessage(`"a"`), "sub": json.RawMessage(`"b"`), "email": json.RawMessage(`"c"`)},
		"invalid JSON": {"iss": json.RawMessage(`"a`), "sub": json.RawMessage(`"b"`)},
		"null sub":     {"iss": json.RawMessage(`"a"`), "sub": json.RawMessage(`null`)},
	} {
		if _, err := r.Lookup(http.Header{}, c); err == nil {
			t.Errorf("%s: Lookup = nil; want an error", name)
		}
	}
	headers, _ := identity.New(identity.Options{Headers: []string{"Authorization"}})
	if _, err := headers.Lookup(http.Header{}, map[string]json.RawMessage{"sub": json.RawMessage(`"b"`)}); err == nil {
		t.Errorf("Lookup with claims on a header resolver = nil; want an error")
	}
}

func TestHeaderNames(t *testing.T) {
	t.Parallel()
	r, err := identity.New(identity.Options{Headers: []string{"authorization", "x-tenant"}, Cookies: []string{"sid"}})
	if err != nil {
		t.Fatal(err)
	}
	got := r.HeaderNames()
	if !slices.Equal(got, []string{"Authorization", "X-Tenant"}) {
		t.Errorf("HeaderNames = %q; want [Authorization X-Tenant]", got)
	}
	got[0] = "changed"
	if r.HeaderNames()[0] != "Authorization" {
		t.Error("HeaderNames shares its slice with the resolver")
	}
}
