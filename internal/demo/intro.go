package demo

import (
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"net/http"
)

// config is the configuration `idemgate demo` runs (config.yaml).
//
//go:embed config.yaml
var config []byte

// Config returns the configuration `idemgate demo` runs, as YAML: the
// memory store and routes for the demo API. The caller fills in the
// upstream URL and the listeners.
func Config() []byte { return bytes.Clone(config) }

// Commands are the curl lines `idemgate demo` prints for a proxy at the
// base URL proxy; cmd/idemgate's test runs them.
func Commands(proxy string) []string {
	// The client's identity: the default, the Authorization header
	// (require_identity is on by default).
	const id = `-H 'Authorization: Bearer demo-client' `
	return []string{
		`curl -si -X POST ` + proxy + `/ucp/v1/carts ` + id + `-H 'Content-Type: application/json' -H 'Idempotency-Key: demo-1' -d '{"items":[{"sku":"tea","qty":2}]}'`,
		`curl -si -X POST ` + proxy + `/ucp/v1/carts ` + id + `-H 'Content-Type: application/json' -H 'Idempotency-Key: demo-1' -d '{ "items": [ {"qty":2, "sku":"tea"} ] }'`,
		`curl -si -X POST ` + proxy + `/ucp/v1/carts ` + id + `-H 'Content-Type: application/json' -H 'Idempotency-Key: demo-1' -d '{"items":[{"sku":"coffee","qty":1}]}'`,
		`curl -si -X POST ` + proxy + `/ucp/v1/carts -H 'Content-Type: application/json' -H 'Idempotency-Key: demo-2' -d '{"items":[{"sku":"tea","qty":2}]}'`,
		`curl -si -X POST ` + proxy + `/ucp/v1/carts ` + id + `-H 'Content-Type: application/json' -d '{"items":[]}'`,
		`curl -si -X POST ` + proxy + `/ucp/v1/checkout-sessions/cart_1/complete ` + id + `-H 'Idempotency-Key: pay-1'`,
		`curl -si -X POST ` + proxy + `/ucp/v1/checkout-sessions/cart_1/complete ` + id + `-H 'Idempotency-Key: pay-1'`,
		`curl -s ` + proxy + `/demo/stats`,
	}
}

// PrintIntro writes what `idemgate demo` prints at start to w: the
// addresses of the proxy, the demo API and the admin listener, and the
// numbered Commands to try.
func PrintIntro(w io.Writer, proxy, upstream, admin string) {
	fmt.Fprintf(w, `idemgate demo
  proxy     %s   (memory store)
  upstream  %s   (a demo carts/orders API that counts its writes)
  admin     %s/healthz

Try:
`, proxy, upstream, admin)
	notes := []string{
		"# 1. a first write: runs upstream, 201",
		"# 2. its retry, formatted differently: replayed (Idempotent-Replayed: true), not run again",
		"# 3. the same key with another body: 409 idempotency_key_reused",
		"# 4. a key without a client identity: 400 idempotency_identity_missing, nothing runs",
		"# 5. a write without a key: runs unprotected",
		"# 6. a checkout: creates order_1",
		"# 7. its retry: the same order, not a second checkout",
		"# 8. what the upstream ran (passed through: no route matches): 3 writes (2 carts, 1 checkout)",
	}
	for i, c := range Commands(proxy) {
		fmt.Fprintf(w, "  %s\n  %s\n\n", notes[i], c)
	}
	fmt.Fprintln(w, "Ctrl-C stops the demo.")
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}
