package app

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/tlsconf/tlstest"
)

// reloadTLS changes a's config through the real reload.
func reloadTLS(t *testing.T, a *App, set func(c *config.Config)) {
	t.Helper()
	next := cloneConfig(t, a.liveConfig())
	set(next)
	data, err := next.EffectiveYAML()
	if err != nil {
		t.Fatal(err)
	}
	a.applyConfig(data, nil)
}

func reloadFailures(t *testing.T, a *App) float64 {
	return testutil.ToFloat64(a.reloads.reloads.WithLabelValues("failure"))
}

// TestTLSReloadFiles: tls.cert_file and tls.key_file reload live. A reload
// naming another pair serves it from the next handshake on, while a
// connection made before keeps working; a reload naming a pair that does
// not load is refused as a whole (the old pair keeps serving, the running
// config keeps its paths), as any invalid reload.
func TestTLSReloadFiles(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	c1, k1 := ca.Leaf(t, 1, time.Now().Add(time.Hour))
	c2, k2 := ca.Leaf(t, 2, time.Now().Add(time.Hour))
	crt1, key1, crt2, key2 := write("1.crt", c1), write("1.key", k1), write("2.crt", c2), write("2.key", k2)
	bad := write("bad.crt", []byte("garbage"))
	app := startTLSApp(t, tlsConfig(t, `
upstream: {url: "`+echoUpstream(t)+`"}
edge_limit: {rate: 0}
tls: {mode: files, cert_file: `+crt1+`, key_file: `+key1+`, http_listen: ""}
`))
	serial := func() int64 {
		t.Helper()
		leaf, err := tlstest.Handshake(app.https, "localhost", ca.Pool)
		if err != nil {
			t.Fatal(err)
		}
		return leaf.SerialNumber.Int64()
	}
	if s := serial(); s != 1 {
		t.Fatalf("serial %d at start; want 1", s)
	}
	early, err := tls.Dial("tcp", app.https, &tls.Config{RootCAs: ca.Pool, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close()

	// New TLS connections, one request each, all through the reloads:
	// none fails.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}, DisableKeepAlives: true, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	ld := startLoad(4, 0, func(int, int) (bool, string) {
		res, err := c.Get("https://" + app.https + "/load")
		if err != nil {
			return false, err.Error()
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode == http.StatusOK, fmt.Sprint(res)
	})
	defer func() {
		ld.stop(t, "requests on new TLS connections across the reloads")
		if ld.sent.Load() == 0 {
			t.Error("no request was sent during the reloads")
		}
	}()
	time.Sleep(100 * time.Millisecond) // traffic on the first pair

	failures := reloadFailures(t, app.app)
	reloadTLS(t, app.app, func(c *config.Config) { c.TLS.CertFile, c.TLS.KeyFile = crt2, key2 })
	if s := serial(); s != 2 {
		t.Errorf("serial %d after the reload; want 2", s)
	}
	if got := reloadFailures(t, app.app); got != failures {
		t.Errorf("reload failures %v; want %v", got, failures)
	}
	early.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := early.Write([]byte("GET /early HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")); err != nil {
		t.Fatalf("the connection made before the reload: %v", err)
	}
	buf := make([]byte, 12)
	if _, err := early.Read(buf); err != nil || string(buf) != "HTTP/1.1 200" {
		t.Errorf("the connection made before the reload reads %q, %v; want HTTP/1.1 200", buf, err)
	}

	reloadTLS(t, app.app, func(c *config.Config) { c.TLS.CertFile = bad })
	if got := reloadFailures(t, app.app); got != failures+1 {
		t.Errorf("reload failures %v; want %v (a pair that does not load refuses the reload)", got, failures+1)
	}
	if s := serial(); s != 2 {
		t.Errorf("serial %d after the refused reload; want 2", s)
	}
	if live := app.app.liveConfig().TLS; live.CertFile != crt2 || live.KeyFile != key2 {
		t.Errorf("running cert_file, key_file %s, %s; want %s, %s", live.CertFile, live.KeyFile, crt2, key2)
	}
	time.Sleep(100 * time.Millisecond) // traffic after the refusal
}

// TestTLSReloadACME: the acme keys reload live: a reload that changes the
// on-demand allow-list rebuilds the ACME manager (same storage, same CA),
// and the next handshake for a newly allowed name gets a certificate from
// the CA, while a name on neither list still fails.
func TestTLSReloadACME(t *testing.T) {
	t.Parallel()
	pb := tlstest.StartPebble(t, tlstest.PebbleOptions{AlwaysValid: true})
	dir := t.TempDir()
	root := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(root, pb.ServerRootPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	app := startTLSApp(t, tlsConfig(t, `
upstream: {url: "`+echoUpstream(t)+`"}
edge_limit: {rate: 0}
tls:
  mode: acme
  ca: "`+pb.DirectoryURL+`"
  ca_root: `+root+`
  storage_dir: `+filepath.Join(dir, "certs")+`
  http_listen: "127.0.0.1:0"
  on_demand: {allow: [".a.idemgate.test"]}
`))
	if _, body := httpsGet(t, app.https, "x.a.idemgate.test", "/a", pb.IssuerRoots); body != "upstream GET /a https" {
		t.Fatalf("before the reload: %q", body)
	}
	if _, err := tlstest.Handshake(app.https, "x.b.idemgate.test", pb.IssuerRoots); err == nil {
		t.Fatal("a name off the allow-list got a certificate before the reload")
	}
	old := app.app.tls.cur.Load()
	reloadTLS(t, app.app, func(c *config.Config) { c.TLS.OnDemand.Allow = []string{".b.idemgate.test"} })
	if app.app.tls.cur.Load() == old {
		t.Fatal("the reload did not rebuild the certificate source")
	}
	if _, body := httpsGet(t, app.https, "x.b.idemgate.test", "/b", pb.IssuerRoots); body != "upstream GET /b https" {
		t.Errorf("after the reload, a newly allowed name: %q", body)
	}
	if _, err := tlstest.Handshake(app.https, "x.c.idemgate.test", pb.IssuerRoots); err == nil {
		t.Error("a name on neither list got a certificate")
	}
	if n := pb.Finalized(); n != 2 {
		t.Errorf("Pebble issued %d certificates; want 2", n)
	}

	// A source that cannot be built (ca_root holds no certificate)
	// refuses the reload; the running one keeps serving.
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	failures, running := reloadFailures(t, app.app), app.app.tls.cur.Load()
	reloadTLS(t, app.app, func(c *config.Config) { c.TLS.CARoot = garbage })
	if got := reloadFailures(t, app.app); got != failures+1 || app.app.tls.cur.Load() != running || app.app.liveConfig().TLS.CARoot != root {
		t.Errorf("a ca_root without a certificate: failures %v (want %v), source replaced %v, running ca_root %s",
			got, failures+1, app.app.tls.cur.Load() != running, app.app.liveConfig().TLS.CARoot)
	}
	if _, body := httpsGet(t, app.https, "x.b.idemgate.test", "/b2", pb.IssuerRoots); body != "upstream GET /b2 https" {
		t.Errorf("after the refused reload: %q", body)
	}
}
