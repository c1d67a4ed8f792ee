package tlsconf_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/tlsconf"
	"github.com/idemgate/idemgate/tlsconf/redisstorage"
	"github.com/idemgate/idemgate/tlsconf/tlstest"
)

// acmeSite is an ACME-managed site on loopback: the HTTP listener (HTTP-01
// and redirects) and the TLS listener.
type acmeSite struct {
	m         *tlsconf.ACME
	httpAddr  string
	httpsAddr string
	logs      *logBuffer
}

// startSite runs m's listeners: httpLn (already bound; Pebble may need its
// port first) answers HTTP-01 and redirects, and a new TLS listener serves
// a tiny handler. Everything stops when the test ends.
func startSite(t *testing.T, opts tlsconf.ACMEOptions, httpLn net.Listener) *acmeSite {
	t.Helper()
	logs := &logBuffer{}
	if opts.Logger == nil {
		opts.Logger = logs.logger()
	}
	if opts.Storage == nil {
		opts.Storage = &certmagic.FileStorage{Path: t.TempDir()}
	}
	m, err := tlsconf.NewACME(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if httpLn == nil {
		httpLn = listenLoopback(t)
	}
	tlsLn := listenLoopback(t)
	_, port, _ := net.SplitHostPort(tlsLn.Addr().String())
	p, _ := strconv.Atoi(port)
	if err := m.Start(httpLn.Addr().String()); err != nil {
		t.Fatal(err)
	}
	quiet := log.New(io.Discard, "", 0)
	hs := &http.Server{Handler: m.HTTPHandler(tlsconf.RedirectHandler(p)), ReadHeaderTimeout: 10 * time.Second, ErrorLog: quiet}
	ts := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "hello "+r.Host)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          quiet,
	}
	done := make(chan struct{}, 2)
	go func() { hs.Serve(httpLn); done <- struct{}{} }()
	go func() { ts.Serve(tls.NewListener(tlsLn, m.TLSConfig())); done <- struct{}{} }()
	t.Cleanup(func() { hs.Close(); ts.Close(); <-done; <-done })
	return &acmeSite{m: m, httpAddr: httpLn.Addr().String(), httpsAddr: tlsLn.Addr().String(), logs: logs}
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// waitCert waits (bounded) until addr serves a certificate for name that
// verifies against roots, and returns it.
func waitCert(t *testing.T, addr, name string, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	var leaf *x509.Certificate
	testutil.Eventually(t, 60*time.Second, "a valid certificate for "+name, func() (err error) {
		leaf, err = handshake(addr, name, roots)
		return err
	})
	return leaf
}

// TestACMEManaged: a managed domain is obtained from Pebble at Start and
// served on the TLS listener; a client verifying against Pebble's root
// accepts it, over HTTP/2.
func TestACMEManaged(t *testing.T) {
	t.Parallel()
	pb := tlstest.StartPebble(t, tlstest.PebbleOptions{AlwaysValid: true})
	site := startSite(t, tlsconf.ACMEOptions{
		Domains: []string{"api.idemgate.test"},
		Email:   "ops@idemgate.test",
		CA:      pb.DirectoryURL,
		Roots:   pb.ServerRoots,
	}, nil)
	leaf := waitCert(t, site.httpsAddr, "api.idemgate.test", pb.IssuerRoots)
	if err := leaf.VerifyHostname("api.idemgate.test"); err != nil {
		t.Error(err)
	}
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pb.IssuerRoots, ServerName: "api.idemgate.test"},
		ForceAttemptHTTP2: true,
	}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + site.httpsAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.ProtoMajor != 2 || !strings.HasPrefix(string(body), "hello") {
		t.Errorf("GET = %s %q; want HTTP/2 hello", res.Proto, body)
	}
	if n := pb.Finalized(); n != 1 {
		t.Errorf("Pebble issued %d certificates; want 1", n)
	}
	// A name that is neither managed nor allowed on demand gets no
	// certificate.
	if _, err := handshake(site.httpsAddr, "other.idemgate.test", pb.IssuerRoots); err == nil {
		t.Errorf("handshake for an unmanaged name succeeded without on-demand")
	}
	// The HTTP listener redirects what is not a challenge.
	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err = c.Get("http://" + site.httpAddr + "/x?y=1")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	_, port, _ := net.SplitHostPort(site.httpsAddr)
	if want := "https://127.0.0.1:" + port + "/x?y=1"; res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != want {
		t.Errorf("http GET = %d %q; want 308 to %q", res.StatusCode, res.Header.Get("Location"), want)
	}
}

// TestACMEHTTP01: Pebble really validates HTTP-01: it resolves the name
// (through its loopback DNS server, not /etc/hosts) and connects to the HTTP
// listener's port, where HTTPHandler answers the challenge.
func TestACMEHTTP01(t *testing.T) {
	t.Parallel()
	httpLn := listenLoopback(t)
	_, port, _ := net.SplitHostPort(httpLn.Addr().String())
	p, _ := strconv.Atoi(port)
	pb := tlstest.StartPebble(t, tlstest.PebbleOptions{HTTPPort: p})
	site := startSite(t, tlsconf.ACMEOptions{
		Domains: []string{"http01.idemgate.test"},
		CA:      pb.DirectoryURL,
		Roots:   pb.ServerRoots,
	}, httpLn)
	waitCert(t, site.httpsAddr, "http01.idemgate.test", pb.IssuerRoots)
	if n := pb.Finalized(); n != 1 {
		t.Errorf("Pebble issued %d certificates; want 1", n)
	}
}

// TestACMEOnDemand: with an allow-list, an allowed name gets a certificate
// during its first handshake; a name off the list fails the handshake and
// no order is placed for it. A managed domain is served too.
func TestACMEOnDemand(t *testing.T) {
	t.Parallel()
	pb := tlstest.StartPebble(t, tlstest.PebbleOptions{AlwaysValid: true})
	allow, err := tlsconf.NewAllowList([]string{".shops.idemgate.test", "exact.idemgate.test"})
	if err != nil {
		t.Fatal(err)
	}
	site := startSite(t, tlsconf.ACMEOptions{
		Domains:  []string{"api.idemgate.test"},
		CA:       pb.DirectoryURL,
		Roots:    pb.ServerRoots,
		OnDemand: allow,
	}, nil)
	waitCert(t, site.httpsAddr, "api.idemgate.test", pb.IssuerRoots)
	ordersBefore := pb.Orders()

	for _, name := range []string{"a.shops.idemgate.test", "exact.idemgate.test"} {
		leaf, err := handshake(site.httpsAddr, name, pb.IssuerRoots)
		if err != nil {
			t.Fatalf("on-demand handshake for allowed %s: %v", name, err)
		}
		if err := leaf.VerifyHostname(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := pb.Orders() - ordersBefore; got != 2 {
		t.Errorf("%d orders for two allowed names; want 2", got)
	}
	ordersBefore = pb.Orders()
	for _, name := range []string{"evil.example", "shops.idemgate.test", "x.exact.idemgate.test"} {
		if _, err := handshake(site.httpsAddr, name, pb.IssuerRoots); err == nil {
			t.Errorf("handshake for %s (not allowed) succeeded", name)
		}
	}
	if got := pb.Orders() - ordersBefore; got != 0 {
		t.Errorf("%d orders placed for names off the allow-list; want 0", got)
	}
	if site.logs.count("evil.example") == 0 {
		t.Errorf("the refused name was not logged")
	}
	// The second handshake for an allowed name is served from the cache.
	ordersBefore = pb.Orders()
	if _, err := handshake(site.httpsAddr, "a.shops.idemgate.test", pb.IssuerRoots); err != nil {
		t.Fatal(err)
	}
	if got := pb.Orders() - ordersBefore; got != 0 {
		t.Errorf("a cached name was ordered again (%d orders)", got)
	}
}

// TestACMEOptions: constructor refusals.
func TestACMEOptions(t *testing.T) {
	t.Parallel()
	st := &certmagic.FileStorage{Path: t.TempDir()}
	if _, err := tlsconf.NewACME(tlsconf.ACMEOptions{Domains: []string{"a.example"}}); err == nil {
		t.Errorf("NewACME without Storage = nil error")
	}
	if _, err := tlsconf.NewACME(tlsconf.ACMEOptions{Storage: st}); err == nil {
		t.Errorf("NewACME without domains or on-demand = nil error")
	}
	m, err := tlsconf.NewACME(tlsconf.ACMEOptions{Storage: st, Domains: []string{"a.example"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Start("no-port"); err == nil {
		t.Errorf("Start with a bad address = nil error")
	}
	if got := m.TLSConfig(); got.MinVersion != tls.VersionTLS12 || got.NextProtos[0] != "h2" {
		t.Errorf("TLSConfig = min %x, protos %q; want TLS 1.2, h2 first", got.MinVersion, got.NextProtos)
	}
	alpn, err := tlsconf.NewACME(tlsconf.ACMEOptions{Storage: st, Domains: []string{"a.example"}, TLSALPN: true})
	if err != nil {
		t.Fatal(err)
	}
	defer alpn.Close()
	if got := alpn.TLSConfig().NextProtos; !strings.Contains(strings.Join(got, ","), "acme-tls/1") {
		t.Errorf("TLS-ALPN enabled, NextProtos = %q; want acme-tls/1 offered", got)
	}
	m.Close()
	if err := m.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestACMEWaitsForStorage: with the Redis storage unreachable at start
// (Redis comes up after idemgate), certificate management waits and then
// obtains the certificate, rather than giving up on the name.
func TestACMEWaitsForStorage(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	g := testutil.NewGate(t, addr)
	g.Shut() // Redis is not up yet: connections are refused
	client, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{g.Addr()}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	st, err := redisstorage.New(client, redisstorage.Options{KeyPrefix: fmt.Sprintf("idemgate-test:%s:%d:", t.Name(), time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pb := tlstest.StartPebble(t, tlstest.PebbleOptions{AlwaysValid: true})
	logs := &logBuffer{}
	site := startSite(t, tlsconf.ACMEOptions{
		Domains: []string{"late.idemgate.test"},
		CA:      pb.DirectoryURL,
		Roots:   pb.ServerRoots,
		Storage: st,
		Logger:  logs.logger(),
	}, nil)
	testutil.Eventually(t, 10*time.Second, "a warning that the storage is unavailable", func() bool {
		return logs.count("certificate storage unavailable") > 0
	})
	if n := pb.Orders(); n != 0 {
		t.Fatalf("%d orders while the storage was down; want 0", n)
	}
	g.Open()
	waitCert(t, site.httpsAddr, "late.idemgate.test", pb.IssuerRoots)
	if n := pb.Finalized(); n != 1 {
		t.Errorf("Pebble issued %d certificates; want 1", n)
	}
}
