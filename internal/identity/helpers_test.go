package identity_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/internal/testutil"
)

// t0 is the tests' "now".
var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// testKey is a signing key with its JWK id and algorithm.
type testKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

var (
	keysOnce sync.Once
	rsaA     testKey
	rsaB     testKey
	edA      testKey
	ecA      testKey
)

// keys generates the tests' keys once: generating RSA keys is slow.
func keys(t testing.TB) {
	t.Helper()
	keysOnce.Do(func() {
		gen := func(bits int) *rsa.PrivateKey {
			k, err := rsa.GenerateKey(rand.Reader, bits)
			if err != nil {
				panic(err)
			}
			return k
		}
		_, ed, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err)
		}
		ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		rsaA = testKey{"rsa-a", jose.RS256, gen(2048)}
		rsaB = testKey{"rsa-b", jose.RS256, gen(2048)}
		edA = testKey{"ed-a", jose.EdDSA, ed}
		ecA = testKey{"ec-a", jose.ES256, ec}
	})
}

// jwks returns the JWK Set JSON of the keys' public halves.
func jwks(t testing.TB, ks ...testKey) []byte {
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

// sign signs payload (raw JSON, used as is) with k; withKid puts k's kid in
// the header.
func sign(t testing.TB, k testKey, withKid bool, payload string) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if withKid {
		opts = opts.WithHeader("kid", k.kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: k.priv}, opts)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.Sign([]byte(payload))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// claims returns a payload with exp an hour after t0, iss and sub, and the
// extra members (raw JSON) appended.
func claims(sub string, extra ...string) string {
	s := fmt.Sprintf(`{"iss":"https://idp.example","sub":%q,"exp":%d,"iat":%d`, sub, t0.Add(time.Hour).Unix(), t0.Unix())
	for _, e := range extra {
		s += "," + e
	}
	return s + "}"
}

// b64 is base64url without padding.
func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// writeFile writes data to path atomically (rename), as a ConfigMap swap or
// an editor would.
func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// fileResolver returns a resolver whose JWK Set file holds ks, with a fake
// clock at t0.
func fileResolver(t testing.TB, mod func(*identity.JWTOptions), ks ...testKey) (*identity.Resolver, *testutil.Clock, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeFile(t, path, jwks(t, ks...))
	clk := testutil.NewClock(t0)
	o := identity.JWTOptions{JWKSFile: path, Leeway: 30 * time.Second}
	if mod != nil {
		mod(&o)
	}
	r, err := identity.New(identity.Options{JWT: &o, Now: clk.Now})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r, clk, path
}

// bearerReq returns a request carrying tok as a Bearer token.
func bearerReq(tok string) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://shop.example/orders", nil)
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	return r
}

func newClock() *testutil.Clock { return testutil.NewClock(t0) }
