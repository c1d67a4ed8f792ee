package tlstest

import (
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/letsencrypt/pebble/v2/ca"
	"github.com/letsencrypt/pebble/v2/db"
	"github.com/letsencrypt/pebble/v2/va"
	"github.com/letsencrypt/pebble/v2/wfe"
	"github.com/miekg/dns"
)

// PebbleOptions configure [StartPebble].
type PebbleOptions struct {
	// AlwaysValid skips challenge validation (PEBBLE_VA_ALWAYS_VALID):
	// every authorization is valid at once.
	AlwaysValid bool
	// HTTPPort is the port Pebble's VA connects to for HTTP-01, on
	// 127.0.0.1: Pebble resolves every name through a loopback DNS server
	// that answers 127.0.0.1 (see [StartLoopbackDNS]), so any name works
	// and /etc/hosts is never read. Needed unless AlwaysValid.
	HTTPPort int
	// Log, when set, receives Pebble's log. Default: discard.
	Log io.Writer
}

// Pebble is a running in-process Pebble.
type Pebble struct {
	// DirectoryURL is the ACME directory ("https://127.0.0.1:N/dir").
	DirectoryURL string
	// ServerRoots trusts the directory's https endpoint (certmagic's
	// TrustedRoots); ServerRootPEM is the same certificate as PEM (a
	// tls.ca_root file).
	ServerRoots   *x509.CertPool
	ServerRootPEM []byte
	// IssuerRoots verify the certificates Pebble issues.
	IssuerRoots *x509.CertPool

	orders, finalized atomic.Int64
}

// Orders reports how many new orders Pebble received.
func (p *Pebble) Orders() int64 { return p.orders.Load() }

// Finalized reports how many orders were finalized: certificates issued.
func (p *Pebble) Finalized() int64 { return p.finalized.Load() }

// envMu serializes Pebble's construction: it reads its knobs from the
// environment in va.New and wfe.New.
var envMu sync.Mutex

// StartPebble runs a Pebble until the test ends: no random validation
// sleeps, no rejected nonces, no authorization reuse, Retry-After 0 (about
// 0.7 s per certificate).
func StartPebble(t testing.TB, opts PebbleOptions) *Pebble {
	t.Helper()
	w := opts.Log
	if w == nil {
		w = io.Discard
	}
	lg := log.New(w, "pebble ", log.Lmicroseconds)
	store := db.NewMemoryStore()
	c := ca.New(lg, store, "", "ecdsa", 0, 1, map[string]ca.Profile{"default": {Description: "test"}})

	envMu.Lock()
	restore := setenv(map[string]string{
		"PEBBLE_VA_NOSLEEP":      "1",
		"PEBBLE_WFE_NONCEREJECT": "0",
		"PEBBLE_AUTHZREUSE":      "0",
		"PEBBLE_VA_ALWAYS_VALID": map[bool]string{true: "1", false: "0"}[opts.AlwaysValid],
	})
	v := va.New(lg, opts.HTTPPort, deadPort(t), false, StartLoopbackDNS(t), store)
	front := wfe.New(lg, store, v, c, []string{"pebble.letsencrypt.org"}, false, false, 0, 0)
	restore()
	envMu.Unlock()

	p := &Pebble{}
	h := front.Handler()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			switch {
			case r.URL.Path == "/order-plz":
				p.orders.Add(1)
			case strings.HasPrefix(r.URL.Path, "/finalize-order/"):
				p.finalized.Add(1)
			}
		}
		h.ServeHTTP(rw, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)

	p.DirectoryURL = srv.URL + "/dir"
	p.ServerRoots = x509.NewCertPool()
	p.ServerRoots.AddCert(srv.Certificate())
	p.ServerRootPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	p.IssuerRoots = x509.NewCertPool()
	p.IssuerRoots.AddCert(c.GetRootCert(0).Cert)
	return p
}

func setenv(vars map[string]string) (restore func()) {
	type old struct {
		v  string
		ok bool
	}
	saved := map[string]old{}
	for k, v := range vars {
		o, ok := os.LookupEnv(k)
		saved[k] = old{o, ok}
		os.Setenv(k, v)
	}
	return func() {
		for k, o := range saved {
			if o.ok {
				os.Setenv(k, o.v)
			} else {
				os.Unsetenv(k)
			}
		}
	}
}

// StartLoopbackDNS runs a DNS server on a loopback TCP port (Pebble's VA
// queries over TCP) until the test ends and returns its address: it answers every A query with 127.0.0.1 and
// every other query with no records, so a client that resolves through it
// (Pebble's VA) reaches this machine under any name, whatever /etc/hosts
// says.
func StartLoopbackDNS(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{Listener: ln, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		for _, question := range q.Question {
			if question.Qtype == dns.TypeA && question.Qclass == dns.ClassINET {
				m.Answer = append(m.Answer, &dns.A{
					Hdr: dns.RR_Header{Name: question.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0},
					A:   net.IPv4(127, 0, 0, 1),
				})
			}
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.ActivateAndServe()
	}()
	<-started
	t.Cleanup(func() {
		_ = srv.Shutdown()
		<-done
	})
	return ln.Addr().String()
}

// deadPort returns a loopback port nothing listens on (Pebble's TLS-ALPN
// port: these tests use HTTP-01).
func deadPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	n, _ := strconv.Atoi(port)
	return n
}
