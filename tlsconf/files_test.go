package tlsconf_test

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/tlsconf"
	"github.com/idemgate/idemgate/tlsconf/tlstest"
)

// waitReload waits for the next OnReload report.
func waitReload(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no reload within 10s")
		return nil
	}
}

func serial(t *testing.T, addr string, ca *tlstest.CA) int64 {
	t.Helper()
	leaf, err := handshake(addr, "localhost", ca.Pool)
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	return leaf.SerialNumber.Int64()
}

// TestFilesKubernetesSecretRotation: a cert-manager Secret volume is
// rotated (kubelet's ..data swap); the next handshake after the reload gets
// the new certificate, an established connection keeps working, and bad
// pairs (mismatched key, expired, garbage) are refused with one log line
// each while the last good pair keeps serving.
func TestFilesKubernetesSecretRotation(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	sec := &tlstest.SecretDir{Dir: t.TempDir()}
	valid := time.Now().Add(24 * time.Hour)
	c1, k1 := ca.Leaf(t, 1, valid)
	sec.Write(t, map[string][]byte{"tls.crt": c1, "tls.key": k1})

	var logs logBuffer
	reloads := make(chan error, 16)
	f, err := tlsconf.NewFiles(tlsconf.FilesOptions{
		CertFile:     filepath.Join(sec.Dir, "tls.crt"),
		KeyFile:      filepath.Join(sec.Dir, "tls.key"),
		PollInterval: time.Hour, // only the watcher can notice in time
		Debounce:     10 * time.Millisecond,
		Logger:       logs.logger(),
		OnReload:     func(err error) { reloads <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := serveTLS(t, f.TLSConfig())
	if got := serial(t, addr, ca); got != 1 {
		t.Fatalf("serial = %d; want 1", got)
	}

	// An established keep-alive connection, used before and after.
	conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "localhost", RootCAs: ca.Pool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	if body := get(t, conn, br); !strings.HasPrefix(body, "hello") {
		t.Fatalf("body = %q", body)
	}

	c2, k2 := ca.Leaf(t, 2, valid)
	sec.Write(t, map[string][]byte{"tls.crt": c2, "tls.key": k2})
	if err := waitReload(t, reloads); err != nil {
		t.Fatalf("reload of a good pair = %v", err)
	}
	if got := serial(t, addr, ca); got != 2 {
		t.Errorf("serial after rotation = %d; want 2", got)
	}
	if body := get(t, conn, br); !strings.HasPrefix(body, "hello") {
		t.Errorf("established connection after rotation: body = %q", body)
	}
	if got := conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); got != 1 {
		t.Errorf("established connection's certificate = %d; want 1 (untouched)", got)
	}

	c3, _ := ca.Leaf(t, 3, valid)
	c4, k4 := ca.Leaf(t, 4, time.Now().Add(-time.Minute))
	for _, bad := range []struct {
		name      string
		cert, key []byte
		is        error
	}{
		{"key of another certificate", c3, k2, nil},
		{"expired", c4, k4, tlsconf.ErrExpired},
		{"garbage", []byte("not PEM"), []byte("nope"), nil},
	} {
		sec.Write(t, map[string][]byte{"tls.crt": bad.cert, "tls.key": bad.key})
		err := waitReload(t, reloads)
		if err == nil {
			t.Errorf("%s: reload = nil; want refused", bad.name)
		} else if bad.is != nil && !errors.Is(err, bad.is) {
			t.Errorf("%s: reload = %v; want %v", bad.name, err, bad.is)
		}
		if got := serial(t, addr, ca); got != 2 {
			t.Errorf("%s: serial = %d; want 2 (the old pair keeps serving)", bad.name, got)
		}
	}
	if n := logs.count("refused the new certificate pair"); n != 3 {
		t.Errorf("%d refusal log lines; want 3", n)
	}
	// The same bad content, checked again (as the poll does), is not
	// logged again.
	for range 3 {
		if err := f.Reload(); err == nil {
			t.Errorf("Reload of the bad pair = nil")
		}
	}
	if n := logs.count("refused the new certificate pair"); n != 3 {
		t.Errorf("%d refusal log lines after re-checks; want still 3", n)
	}

	c5, k5 := ca.Leaf(t, 5, valid)
	sec.Write(t, map[string][]byte{"tls.crt": c5, "tls.key": k5})
	if err := waitReload(t, reloads); err != nil {
		t.Fatalf("reload after bad pairs = %v", err)
	}
	if got := serial(t, addr, ca); got != 5 {
		t.Errorf("serial = %d; want 5", got)
	}
	if n := logs.count("certificate reloaded"); n != 2 {
		t.Errorf("%d reload log lines; want 2", n)
	}
}

// TestFilesPollOnly: without the watcher, files rewritten in place are
// picked up by the periodic hash check.
func TestFilesPollOnly(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writePair := func(c, k []byte) {
		if err := os.WriteFile(keyFile, k, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, c, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c1, k1 := ca.Leaf(t, 1, time.Now().Add(time.Hour))
	writePair(c1, k1)
	reloads := make(chan error, 64)
	f, err := tlsconf.NewFiles(tlsconf.FilesOptions{
		CertFile: certFile, KeyFile: keyFile,
		PollInterval: 20 * time.Millisecond,
		NoWatch:      true,
		OnReload:     func(err error) { reloads <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := serveTLS(t, f.TLSConfig())
	if got := serial(t, addr, ca); got != 1 {
		t.Fatalf("serial = %d; want 1", got)
	}
	c2, k2 := ca.Leaf(t, 2, time.Now().Add(time.Hour))
	writePair(c2, k2)
	testutil.Eventually(t, 10*time.Second, "poll picks up the new pair", func() bool {
		select {
		case err := <-reloads:
			return err == nil
		default:
			return false
		}
	})
	if got := serial(t, addr, ca); got != 2 {
		t.Errorf("serial = %d; want 2", got)
	}
}

// TestFilesRefusedAtStart: idemgate does not start with a bad pair.
func TestFilesRefusedAtStart(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	good, goodKey := ca.Leaf(t, 1, time.Now().Add(time.Hour))
	_, otherKey := ca.Leaf(t, 2, time.Now().Add(time.Hour))
	expired, expiredKey := ca.Leaf(t, 3, time.Now().Add(-time.Hour))
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, cert, key string
		is              error
	}{
		{"missing cert", filepath.Join(dir, "nope.pem"), write("k1", goodKey), os.ErrNotExist},
		{"mismatched key", write("c2", good), write("k2", otherKey), nil},
		{"expired", write("c3", expired), write("k3", expiredKey), tlsconf.ErrExpired},
		{"no key file", write("c4", good), "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f, err := tlsconf.NewFiles(tlsconf.FilesOptions{CertFile: tt.cert, KeyFile: tt.key})
			if err == nil {
				f.Close()
				t.Fatal("NewFiles = nil error; want refused")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("NewFiles = %v; want %v", err, tt.is)
			}
		})
	}
}

// TestServerConfig: TLS 1.2 at least, AEAD suites only, HTTP/2 offered.
func TestServerConfig(t *testing.T) {
	t.Parallel()
	ca := tlstest.NewCA(t)
	dir := t.TempDir()
	c, k := ca.Leaf(t, 1, time.Now().Add(time.Hour))
	os.WriteFile(filepath.Join(dir, "c"), c, 0o644)
	os.WriteFile(filepath.Join(dir, "k"), k, 0o600)
	f, err := tlsconf.NewFiles(tlsconf.FilesOptions{CertFile: filepath.Join(dir, "c"), KeyFile: filepath.Join(dir, "k")})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	addr := serveTLS(t, f.TLSConfig())

	t.Run("TLS 1.1 refused", func(t *testing.T) {
		t.Parallel()
		conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "localhost", RootCAs: ca.Pool, MaxVersion: tls.VersionTLS11})
		if err == nil {
			conn.Close()
			t.Fatal("TLS 1.1 handshake succeeded")
		}
	})
	t.Run("CBC suite refused", func(t *testing.T) {
		t.Parallel()
		conn, err := tls.Dial("tcp", addr, &tls.Config{
			ServerName: "localhost", RootCAs: ca.Pool, MaxVersion: tls.VersionTLS12,
			CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA},
		})
		if err == nil {
			conn.Close()
			t.Fatal("a CBC-SHA1 suite was accepted")
		}
	})
	t.Run("TLS 1.2 AEAD accepted", func(t *testing.T) {
		t.Parallel()
		conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "localhost", RootCAs: ca.Pool, MaxVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
	})
	t.Run("HTTP/2", func(t *testing.T) {
		t.Parallel()
		// Dial the address, not the name: /etc/hosts may lack localhost.
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool, ServerName: "localhost"}, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		res, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.ProtoMajor != 2 {
			t.Errorf("protocol = %s; want HTTP/2", res.Proto)
		}
	})
}
