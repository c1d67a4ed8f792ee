package app

// End-to-end tests of tls.mode files and acme (issue 7): real listeners on
// 127.0.0.1, Pebble in the test process as the ACME CA, and real Redis for
// the shared certificate storage (skipped without IDEMGATE_TEST_REDIS_ADDR
// unless IDEMGATE_REQUIRE_REDIS=1).

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/tlsconf/tlstest"
)

// tlsApp is a running idemgate with TLS.
type tlsApp struct {
	https, http string // listener addresses
	app         *App
}

// startTLSApp runs an app for cfg on loopback listeners (public, admin and
// the HTTP listener) until the test ends.
func startTLSApp(t *testing.T, cfg *config.Config) tlsApp {
	t.Helper()
	a, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	lns, err := Listen("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	if cfg.TLS.EffectiveHTTPListen() != "" {
		if lns.HTTP, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	app := tlsApp{https: lns.Public.Addr().String(), app: a}
	if lns.HTTP != nil {
		app.http = lns.HTTP.Addr().String()
	}
	serveUntilCleanup(t, a, lns)
	return app
}

func tlsConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate = %v; want tls accepted", err)
	}
	return cfg
}

// echoUpstream answers "upstream <method> <path> <X-Forwarded-Proto>".
func echoUpstream(t *testing.T) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream %s %s %s", r.Method, r.URL.Path, r.Header.Get("X-Forwarded-Proto"))
	}))
	t.Cleanup(up.Close)
	return up.URL
}

// httpsGet sends GET url through a client that trusts roots and speaks
// HTTP/2, with serverName as SNI, and returns protocol and body.
func httpsGet(t *testing.T, addr, serverName, path string, roots *x509.CertPool) (string, string) {
	t.Helper()
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + addr + path)
	if err != nil {
		t.Fatalf("GET https://%s%s: %v", addr, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.Proto, string(b)
}

// waitServed waits (bounded) until addr serves a certificate for name
// that verifies against roots.
func waitServed(t *testing.T, addr, name string, roots *x509.CertPool) *x509.Certificate {
	t.Helper()
	var leaf *x509.Certificate
	testutil.Eventually(t, 60*time.Second, addr+": a valid certificate for "+name, func() (err error) {
		leaf, err = tlstest.Handshake(addr, name, roots)
		return err
	})
	return leaf
}

// TestTLSFiles: tls.mode files serves the proxy over TLS (HTTP/2), the
// HTTP listener redirects to https, and a Secret rotated on disk is served
// by later handshakes without a restart.
func TestTLSFiles(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	sec := &tlstest.SecretDir{Dir: t.TempDir()}
	c1, k1 := ca.Leaf(t, 1, time.Now().Add(time.Hour))
	sec.Write(t, map[string][]byte{"tls.crt": c1, "tls.key": k1})
	cfg := tlsConfig(t, `
upstream: {url: "`+echoUpstream(t)+`"}
edge_limit: {rate: 0}
tls:
  mode: files
  cert_file: `+filepath.Join(sec.Dir, "tls.crt")+`
  key_file: `+filepath.Join(sec.Dir, "tls.key")+`
  http_listen: "127.0.0.1:0"
`)
	app := startTLSApp(t, cfg)
	proto, body := httpsGet(t, app.https, "localhost", "/orders/1", ca.Pool)
	if proto != "HTTP/2.0" || body != "upstream GET /orders/1 https" {
		t.Errorf("GET over TLS = %s %q; want HTTP/2.0 and the upstream's answer, X-Forwarded-Proto https", proto, body)
	}

	c := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Post("http://"+app.http+"/pay?x=1", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	_, port, _ := net.SplitHostPort(app.https)
	if want := "https://127.0.0.1:" + port + "/pay?x=1"; res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != want {
		t.Errorf("POST on the HTTP listener = %d %q; want 308 to %q", res.StatusCode, res.Header.Get("Location"), want)
	}

	c2, k2 := ca.Leaf(t, 2, time.Now().Add(time.Hour))
	sec.Write(t, map[string][]byte{"tls.crt": c2, "tls.key": k2})
	testutil.Eventually(t, 15*time.Second, "the rotated certificate", func() bool {
		leaf, err := tlstest.Handshake(app.https, "localhost", ca.Pool)
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.Int64() == 2
	})
}

// TestTLSFilesRefusedAtStart: no valid pair, no start; the error names
// the keys.
func TestTLSFilesRefusedAtStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tls.crt"), []byte("garbage"), 0o600)
	os.WriteFile(filepath.Join(dir, "tls.key"), []byte("garbage"), 0o600)
	cfg := tlsConfig(t, `
upstream: {url: "http://127.0.0.1:1"}
tls: {mode: files, cert_file: `+filepath.Join(dir, "tls.crt")+`, key_file: `+filepath.Join(dir, "tls.key")+`}
`)
	a, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		a.Close()
		t.Fatal("newApp with a garbage pair = nil error")
	}
	if !strings.Contains(err.Error(), "tls.cert_file") {
		t.Errorf("error = %v; want it to name tls.cert_file", err)
	}
}

// TestTLSACMEOnDemand: tls.mode acme with certmagic's file storage in
// storage_dir, a private CA (Pebble) trusted through ca_root, and an
// on-demand allow-list: an allowed name gets a certificate on its first
// handshake and reaches the upstream; a name off the list fails the
// handshake.
func TestTLSACMEOnDemand(t *testing.T) {
	t.Parallel()
	pb := tlstest.StartPebble(t, tlstest.PebbleOptions{AlwaysValid: true})
	dir := t.TempDir()
	root := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(root, pb.ServerRootPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	storage := filepath.Join(dir, "certs")
	cfg := tlsConfig(t, `
upstream: {url: "`+echoUpstream(t)+`"}
edge_limit: {rate: 0}
tls:
  mode: acme
  email: ops@idemgate.test
  ca: "`+pb.DirectoryURL+`"
  ca_root: `+root+`
  storage_dir: `+storage+`
  http_listen: "127.0.0.1:0"
  on_demand: {allow: [".shops.idemgate.test"]}
`)
	app := startTLSApp(t, cfg)
	proto, body := httpsGet(t, app.https, "a.shops.idemgate.test", "/x", pb.IssuerRoots)
	if proto != "HTTP/2.0" || body != "upstream GET /x https" {
		t.Errorf("GET = %s %q; want HTTP/2.0 and the upstream's answer", proto, body)
	}
	if _, err := tlstest.Handshake(app.https, "b.evil.example", pb.IssuerRoots); err == nil {
		t.Errorf("handshake for a name off the allow-list succeeded")
	}
	if n := pb.Finalized(); n != 1 {
		t.Errorf("Pebble issued %d certificates; want 1", n)
	}
	if _, err := os.Stat(filepath.Join(storage, "certificates")); err != nil {
		t.Errorf("certificates not kept in storage_dir: %v", err)
	}
}

// TestTLSACMEReplicasShareRedis: two replicas on one Redis (store.backend
// redis) manage the same domain; certmagic's lock in the Redis storage
// lets one of them order it, and both serve that one certificate.
func TestTLSACMEReplicasShareRedis(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	pb := tlstest.StartPebble(t, tlstest.PebbleOptions{AlwaysValid: true})
	root := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(root, pb.ServerRootPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := `
upstream: {url: "` + echoUpstream(t) + `"}
edge_limit: {rate: 0}
store:
  backend: redis
  redis: {addrs: ["` + addr + `"], key_prefix: "` + e2ePrefix(t) + `"}
tls:
  mode: acme
  domains: [api.idemgate.test]
  ca: "` + pb.DirectoryURL + `"
  ca_root: ` + root + `
  http_listen: "127.0.0.1:0"
`
	var apps [2]tlsApp
	var wg sync.WaitGroup
	for i := range apps {
		cfg := tlsConfig(t, yaml)
		wg.Go(func() { apps[i] = startTLSApp(t, cfg) })
	}
	wg.Wait()
	var serials [2]string
	for i, app := range apps {
		serials[i] = waitServed(t, app.https, "api.idemgate.test", pb.IssuerRoots).SerialNumber.String()
		if _, body := httpsGet(t, app.https, "api.idemgate.test", "/r", pb.IssuerRoots); body != "upstream GET /r https" {
			t.Errorf("replica %d: body = %q", i, body)
		}
	}
	if serials[0] != serials[1] {
		t.Errorf("replicas serve certificates %s and %s; want the same one", serials[0], serials[1])
	}
	if o, f := pb.Orders(), pb.Finalized(); o != 1 || f != 1 {
		t.Errorf("Pebble saw %d orders, %d certificates for two replicas; want 1 and 1", o, f)
	}
}

// TestTLSConfigAccepted: tls modes pass checkConfig (validate) now.
func TestTLSConfigAccepted(t *testing.T) {
	t.Parallel()
	for _, tls := range []string{
		`{mode: files, cert_file: /c.pem, key_file: /k.pem}`,
		`{mode: acme, domains: [a.example]}`,
	} {
		cfg, err := config.Parse([]byte("upstream: {url: \"http://127.0.0.1:1\"}\ntls: " + tls + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil && strings.Contains(err.Error(), "tls") {
			t.Errorf("Validate(tls: %s) = %v; want tls accepted", tls, err)
		}
	}
}
