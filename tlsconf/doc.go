// Package tlsconf terminates TLS for idemgate's public listener, in one of
// two ways (config key tls.mode):
//
//   - [Files] serves a certificate pair from PEM files (a cert-manager
//     Secret) and reloads it when the files change, noticed by an fsnotify
//     watch on their directories (a Kubernetes Secret's "..data" symlink
//     swap included), a periodic content hash, or [Files.Reload]. A bad new
//     pair is refused with a log line and the old one keeps serving.
//   - [ACME] obtains and renews certificates from an ACME CA with
//     certmagic's lower-level API: the caller keeps its own listeners and
//     http.Server (timeouts, graceful shutdown), serves [ACME.TLSConfig]
//     and answers HTTP-01 with [ACME.HTTPHandler]. Issuance during a
//     handshake (on demand) happens only for names an [AllowList] allows.
//
// Both produce a tls.Config from [ServerConfig]: TLS 1.2 at least,
// forward-secret AEAD suites, ALPN "h2" and "http/1.1", so that an
// http.Server serving tls.NewListener speaks HTTP/2. [RedirectHandler]
// sends plain-HTTP requests to https.
//
// Certificates live in a certmagic.Storage: certmagic's FileStorage for one
// instance, or package redisstorage on the store's Redis client so that
// replicas share certificates, challenges and locks (one order, one
// renewal). Package storagetest checks a Storage against certmagic's
// contract; package tlstest runs Pebble in a test process.
package tlsconf
