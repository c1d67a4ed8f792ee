package connguard

import (
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/tlsconf/tlstest"
)

// TestTLSListenerALPN: a connection that negotiated an ALPN protocol
// net/http does not serve (acme-tls/1: the handshake was all it was for)
// is closed after the handshake, as net/http does for a *tls.Conn; one
// that negotiated http/1.1 is served, with r.TLS set.
func TestTLSListenerALPN(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	crt, key := ca.Leaf(t, 1, time.Now().Add(time.Hour))
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2", "http/1.1", "acme-tls/1"}}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			Check(w, r)
			if r.TLS == nil {
				t.Error("r.TLS not set")
			}
			io.WriteString(w, "served")
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	limit := NewLimit(64 << 10)
	if err := ServeTLS(srv, limit); err != nil {
		t.Fatal(err)
	}
	go srv.Serve(NewTLSListener(ln, cfg, limit, srv.ErrorLog))
	t.Cleanup(func() { srv.Close() })

	for _, tc := range []struct {
		alpn string
		want string // what the client reads after sending a request
	}{
		{"acme-tls/1", ""},
		{"http/1.1", "served"},
	} {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: ca.Pool, ServerName: "localhost", NextProtos: []string{tc.alpn}})
		if err != nil {
			t.Fatalf("%s: %v", tc.alpn, err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		b, _ := io.ReadAll(c)
		c.Close()
		if got := string(b); (tc.want == "") != (got == "") || (tc.want != "" && !strings.Contains(got, tc.want)) {
			t.Errorf("%s: read %q; want %q", tc.alpn, got, tc.want)
		}
	}
}
