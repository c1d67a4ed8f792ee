package tlsconf

import (
	"crypto/tls"
)

// nextProtos are the ALPN protocols the public listener offers: HTTP/2
// first, then HTTP/1.1.
var nextProtos = []string{"h2", "http/1.1"}

// cipherSuites are the TLS 1.2 suites offered: forward secret AEADs only
// (Mozilla's "intermediate" profile). TLS 1.3's suites are not
// configurable in Go, and all of them are modern.
var cipherSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, // required by HTTP/2 (RFC 9113 §9.2.2)
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// ServerConfig returns the public listener's TLS configuration around
// getCertificate: TLS 1.2 at least, forward-secret AEAD suites for TLS 1.2,
// Go's default key exchanges (X25519MLKEM768, X25519, P-256, P-384), and
// ALPN "h2" and "http/1.1" followed by extra (for example "acme-tls/1").
// Serve it with tls.NewListener under an http.Server, which then speaks
// HTTP/2 to clients that negotiate "h2".
func ServerConfig(getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error), extra ...string) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		CipherSuites:   cipherSuites,
		GetCertificate: getCertificate,
		NextProtos:     append(append([]string(nil), nextProtos...), extra...),
	}
}
