package identity_test

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/identity"
)

// FuzzResolveToken feeds arbitrary Authorization values to a JWT resolver
// with RSA, Ed25519 and ECDSA keys. Nothing may panic, and nothing may
// verify but the tokens the test signed itself, spelled exactly as signed
// (no re-spelling of base64url's unused bits passes either).
func FuzzResolveToken(f *testing.F) {
	keys(f)
	signed := []string{
		sign(f, rsaA, true, claims("alice")),
		sign(f, edA, false, claims("bob", `"aud":["x","y"]`)),
		sign(f, ecA, true, claims("carol", `"nbf":1`)),
	}
	for _, s := range signed {
		f.Add("Bearer " + s)
		f.Add(s)
		parts := strings.Split(s, ".")
		f.Add("Bearer " + parts[0] + "." + parts[1] + ".")
		f.Add("Bearer " + b64(`{"alg":"none"}`) + "." + parts[1] + ".")
		f.Add("Bearer " + parts[0] + "." + b64(`{"sub":"x","sub":"y"}`) + "." + parts[2])
	}
	f.Add("Bearer " + b64(`{"alg":"RS256","kid":"rsa-a","crit":["b64"],"b64":false}`) + ".e30.AAAA")
	f.Add("Bearer e30.e30.e30")
	f.Add("Bearer ...")
	f.Add("")
	want := map[[3]string]bool{}
	for _, s := range signed {
		want[decode3(s)] = true
	}
	r, _, _ := fileResolver(f, nil, rsaA, edA, ecA)
	f.Fuzz(func(t *testing.T, auth string) {
		req, _ := http.NewRequest(http.MethodPost, "http://x/", nil)
		req.Header["Authorization"] = []string{auth}
		res := r.Resolve(req)
		switch res.Status {
		case identity.Invalid:
			if res.Err == nil || res.Verified {
				t.Fatalf("invalid without an error, or verified")
			}
			return
		case identity.Empty:
			if strings.TrimSpace(auth) != "" {
				t.Fatalf("a non-empty Authorization %q is Empty", auth)
			}
			return
		}
		tok := strings.TrimSpace(auth[len("bearer"):])
		if !res.Verified || !want[decode3(tok)] || !slices.Contains(signed, tok) {
			t.Fatalf("Authorization %q verified, but decodes to no token the test signed", auth)
		}
	})
}

// decode3 decodes a compact JWS's three segments, leniently.
func decode3(tok string) [3]string {
	var out [3]string
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return out
	}
	for i, p := range parts {
		b, err := base64.RawURLEncoding.DecodeString(p)
		if err != nil {
			return [3]string{}
		}
		out[i] = string(b)
	}
	return out
}
