package identity_test

import (
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/internal/identity"
)

// BenchmarkResolve measures what an identity costs a keyed write: a header
// identity (today's default), a JWT identity on a warm cache (a token seen
// before), and cold verifications (first sight of a token) with RS256
// (2048-bit) and EdDSA. Cold runs alternate two tokens in a one-entry cache,
// so every call verifies. Each includes ScopeKey, as the proxy's claim does.
func BenchmarkResolve(b *testing.B) {
	keys(b)
	headerRes, err := identity.New(identity.Options{Headers: []string{"Authorization"}})
	if err != nil {
		b.Fatal(err)
	}
	rsaTok := sign(b, rsaA, true, claims("alice"))
	b.Run("header", func(b *testing.B) {
		run(b, headerRes, rsaTok)
	})
	cookieRes, err := identity.New(identity.Options{Headers: []string{"X-Shop"}, Cookies: []string{"sid"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("cookie", func(b *testing.B) {
		req := bearerReq(rsaTok)
		req.Header.Set("X-Shop", "s1")
		req.Header.Set("Cookie", "_ga=GA1.2.3; theme=dark; sid=3f9a1c7e5b2d4e6f8a0b1c2d3e4f5a6b; lang=en; consent=yes")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if res := cookieRes.Resolve(req); res.Status != identity.Present {
					b.Fatal(res.Err)
				}
			}
		})
	})
	warm, _, _ := fileResolver(b, nil, rsaA, edA)
	b.Run("jwt_warm", func(b *testing.B) {
		run(b, warm, rsaTok)
	})
	cold, _, _ := fileResolver(b, func(o *identity.JWTOptions) { o.CacheSize = 1 }, rsaA, edA)
	b.Run("jwt_cold_RS256", func(b *testing.B) {
		run(b, cold, rsaTok, sign(b, rsaA, true, claims("bob")))
	})
	b.Run("jwt_cold_EdDSA", func(b *testing.B) {
		run(b, cold, sign(b, edA, true, claims("alice")), sign(b, edA, true, claims("bob")))
	})
}

func run(b *testing.B, r *identity.Resolver, toks ...string) {
	reqs := make([]*http.Request, len(toks))
	for i, t := range toks {
		reqs[i] = bearerReq(t)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			res := r.Resolve(reqs[i%len(reqs)])
			if res.Status != identity.Present {
				b.Fatal(res.Err)
			}
			_ = identity.ScopeKey("shop", res, "order-123")
			i++
		}
	})
}
