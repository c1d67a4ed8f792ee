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
