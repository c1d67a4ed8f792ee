package identity_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"net/netip"
	"testing"

	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/limiter"
)

func TestParseBy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"", "client_ip", true},
		{"client_ip", "client_ip", true},
		{"identity", "identity", true},
		{"header:x-api-key", "header:X-Api-Key", true},
		{"header:", "", false},
		{"header:X Y", "", false},
		{"ip", "", false},
		{"Identity", "", false},
	}
	for _, tt := range tests {
		b, err := identity.ParseBy(tt.in)
		if (err == nil) != tt.ok || err == nil && b.String() != tt.want {
			t.Errorf("ParseBy(%q) = %v, %v; want %q, ok %v", tt.in, b, err, tt.want, tt.ok)
		}
	}
	if !identity.ByIdentity.IsIdentity() || identity.ByClientIP.IsIdentity() {
		t.Errorf("IsIdentity wrong")
	}
	if b, _ := identity.ParseBy("header:x-a"); b.Header() != "X-A" {
		t.Errorf("Header() = %q; want X-A", b.Header())
	}
}

// TestKeyFor: by identity, two identities from one address get separate
// keys and one identity from two addresses one key; anything unverified
// counts per address, so random tokens or cookies buy nothing.
func TestKeyFor(t *testing.T) {
	t.Parallel()
	keys(t)
	r, _, _ := fileResolver(t, nil, edA)
	cookies, _ := identity.New(identity.Options{Cookies: []string{"sid"}})
	addr1 := limiter.Bucket(netip.MustParseAddr("192.0.2.1"))
	addr2 := limiter.Bucket(netip.MustParseAddr("2001:db8::1"))
	alice := r.Resolve(bearerReq(sign(t, edA, true, claims("alice"))))
	alice2 := r.Resolve(bearerReq(sign(t, edA, true, claims("alice", `"jti":"x"`))))
	bob := r.Resolve(bearerReq(sign(t, edA, true, claims("bob"))))
	_, otherEd, _ := ed25519.GenerateKey(rand.Reader)
	forged := r.Resolve(bearerReq(sign(t, testKey{"ed-a", edA.alg, otherEd}, true, claims("alice"))))
	empty := r.Resolve(bearerReq(""))
	sid := cookies.Resolve(&http.Request{Header: http.Header{"Cookie": {"sid=a"}}})
	noKeys, _ := urlResolver(t, "http://"+testutil.DeadAddr(t)+"/jwks.json")
	unavailable := noKeys.Resolve(bearerReq(sign(t, edA, true, claims("alice"))))
	if unavailable.Status != identity.Unavailable {
		t.Fatalf("a token while the JWK Set URL refuses = %v; want unavailable", unavailable.Status)
	}

	key := func(b identity.By, h http.Header, id identity.Result, a limiter.Key) (identity.LimitKey, bool) {
		return b.KeyFor(h, id, a)
	}
	by := identity.ByIdentity
	ka1, pa := key(by, nil, alice, addr1)
	ka2, _ := key(by, nil, alice2, addr2)
	kb1, _ := key(by, nil, bob, addr1)
	if pa || ka1 != ka2 {
		t.Errorf("one identity from two addresses: keys differ or per address")
	}
	if ka1 == kb1 {
		t.Errorf("two identities from one address share a key")
	}
	ip1, _ := key(identity.ByClientIP, nil, alice, addr1)
	for name, id := range map[string]identity.Result{"forged": forged, "empty": empty, "cookie (unverified)": sid, "unavailable (no keys yet)": unavailable} {
		k, per := key(by, nil, id, addr1)
		if !per || k != ip1 {
			t.Errorf("%s: per address = %v, key = address's %v; want both", name, per, k == ip1)
		}
	}
	if ka1 == ip1 {
		t.Errorf("identity key equals an address key")
	}

	hb, _ := identity.ParseBy("header:X-Api-Key")
	kh1, per1 := key(hb, http.Header{"X-Api-Key": {"k1"}}, identity.Result{}, addr1)
	kh2, _ := key(hb, http.Header{"X-Api-Key": {"k1"}}, identity.Result{}, addr2)
	kh3, _ := key(hb, http.Header{"X-Api-Key": {"k2"}}, identity.Result{}, addr1)
	kh4, per4 := key(hb, http.Header{"X-Api-Key": {""}}, identity.Result{}, addr1)
	if per1 || kh1 != kh2 || kh1 == kh3 {
		t.Errorf("header keys: same value differ or other value same")
	}
	if !per4 || kh4 != ip1 {
		t.Errorf("empty header: want the address's key")
	}
	if ip2, _ := key(identity.ByClientIP, nil, identity.Result{}, addr2); ip2 == ip1 {
		t.Errorf("two addresses share a key")
	}
}
