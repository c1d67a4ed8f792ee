// Package tlstest holds test helpers for TLS: a throw-away certificate
// authority, an emulated Kubernetes Secret volume (kubelet's AtomicWriter
// layout, for rotation tests), and Pebble, Let's Encrypt's test ACME CA,
// run inside the test process (its ca, db, va and wfe packages behind an
// httptest TLS server on 127.0.0.1) so that ACME is tested end to end
// offline.
//
// Only test binaries import it.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA issues leaf certificates.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// Pool holds the CA's certificate: a client's RootCAs.
	Pool *x509.CertPool
}

// NewCA returns a fresh CA, valid from an hour ago for a day.
func NewCA(t testing.TB) *CA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "idemgate test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{cert: cert, key: key, Pool: pool}
}

// Leaf returns a PEM certificate for "localhost" and 127.0.0.1 with the
// given serial number, valid until notAfter (from two days before), and
// its PEM private key.
func (ca *CA) Leaf(t testing.TB, serial int64, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:    notAfter.Add(-48 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// SecretDir emulates a Kubernetes Secret volume written by kubelet's
// AtomicWriter: each file is a symlink through "..data" into a
// "..<timestamp>" directory; an update writes a new directory, points
// "..data_tmp" at it, renames that over "..data" (the atomic swap) and
// removes the old directory.
type SecretDir struct {
	// Dir is the mount point: Dir/tls.crt and so on.
	Dir string
	gen int
}

// Write publishes files (name → content) as the Secret's new version.
func (s *SecretDir) Write(t testing.TB, files map[string][]byte) {
	t.Helper()
	s.gen++
	ts := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", s.gen%60, s.gen)
	if err := os.Mkdir(filepath.Join(s.Dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(s.Dir, ts, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old, _ := os.Readlink(filepath.Join(s.Dir, "..data"))
	tmp := filepath.Join(s.Dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(s.Dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(s.Dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(s.Dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// Handshake dials addr (TLS), verifies the certificate served for
// serverName against roots, and returns it.
func Handshake(addr, serverName string, roots *x509.CertPool) (*x509.Certificate, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: serverName, RootCAs: roots})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0], nil
}
