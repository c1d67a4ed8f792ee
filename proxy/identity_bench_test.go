package proxy

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// cannedTransport answers every request with a 201 and benchRespBody, in
// process: the benchmark then measures idemgate's own CPU.
type cannedTransport struct{}

func (cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{
		StatusCode:    http.StatusCreated,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(benchRespBody)),
		ContentLength: int64(len(benchRespBody)),
		Request:       r,
	}, nil
}

// processCPU is the user and system CPU time of this process so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkKeyedIdentity measures a keyed first write (a new key each
// time) through the whole proxy, in process, with a header identity (the
// Authorization default) and with a JWT identity whose token was verified
// before (warm cache): the difference is what a JWT identity costs a
// request (issue 14: at most 15 µs).
func BenchmarkKeyedIdentity(b *testing.B) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	jwks, err := json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: priv.Public(), KeyID: "k1", Algorithm: "EdDSA", Use: "sig"}}})
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "jwks.json")
	if err := os.WriteFile(path, jwks, 0o600); err != nil {
		b.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: priv}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", "k1"))
	if err != nil {
		b.Fatal(err)
	}
	obj, err := signer.Sign(fmt.Appendf(nil, `{"iss":"https://idp.example","sub":"alice","exp":%d}`, time.Now().Add(24*time.Hour).Unix()))
	if err != nil {
		b.Fatal(err)
	}
	tok, err := obj.CompactSerialize()
	if err != nil {
		b.Fatal(err)
	}
	jwtRes, err := identity.New(identity.Options{JWT: &identity.JWTOptions{JWKSFile: path, Algorithms: []string{"EdDSA"}}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { jwtRes.Close() })
	for _, tc := range []struct {
		name string
		id   *identity.Resolver // nil: the header default
	}{{"header", nil}, {"jwt_warm", jwtRes}} {
		b.Run(tc.name, func(b *testing.B) {
			st := memstore.New(memstore.Options{MaxEntries: 1 << 30, MaxBytes: 1 << 40})
			defer st.Close()
			u, _ := url.Parse("http://upstream.invalid")
			p, err := newOpts(Options{
				Upstream:  u,
				Transport: cannedTransport{},
				Stages: Stages{
					Routes:          []Route{{Name: "create_cart", Method: http.MethodPost, Path: "/ucp/v1/carts", Idempotent: true}},
					Identity:        tc.id,
					RequireIdentity: true,
				},
				Store:       st,
				Idempotency: Idempotency{IdentityHeaders: []string{"Authorization"}, ReplayHeader: benchReplayHeader},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close()
			auth := []string{"Bearer " + tok}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			for i := range b.N {
				req := httptest.NewRequest(http.MethodPost, "http://shop.example/ucp/v1/carts", bytes.NewReader(benchReqBody))
				req.Header["Content-Type"] = []string{"application/json"}
				req.Header["Authorization"] = auth
				req.Header["Idempotency-Key"] = []string{"k-" + strconv.Itoa(i)}
				w := httptest.NewRecorder()
				p.ServeHTTP(w, req)
				if w.Code != http.StatusCreated || strings.Contains(w.Header().Get(benchReplayHeader), "true") {
					b.Fatalf("answer %d %s; want a first 201", w.Code, w.Body)
				}
			}
			b.StopTimer()
			// The process's CPU time per request: unlike ns/op, it does not
			// count time spent waiting for a core on a loaded machine.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
