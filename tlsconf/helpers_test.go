package tlsconf_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/tlsconf/tlstest"
)

// serveTLS serves a tiny handler on 127.0.0.1 with cfg and returns its
// address; the server stops when the test ends.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello %s over %s", r.Host, r.Proto)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0), // refused handshakes are expected
	}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(tls.NewListener(ln, cfg)) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

func handshake(addr, serverName string, roots *x509.CertPool) (*x509.Certificate, error) {
	return tlstest.Handshake(addr, serverName, roots)
}

// get sends one HTTP/1.1 request on an established connection and returns
// the body.
func get(t *testing.T, c *tls.Conn, br *bufio.Reader) string {
	t.Helper()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("request on the established connection: %v", err)
	}
	defer res.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(res.Body)
	return b.String()
}

// logBuffer is a slog handler target that tests can search.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
