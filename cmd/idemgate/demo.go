package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/cliflags"
	"github.com/idemgate/idemgate/internal/demo"
)

// demoConfig is the embedded default configuration of `idemgate demo`: the
// memory store and routes for the demo API. The upstream URL is filled in
// at start.
//
//go:embed demo.yaml
var demoConfig []byte

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cliflags.New("demo", "usage: idemgate demo [--listen ADDR] [--admin-listen ADDR] [--log-level L]\n  Runs idemgate with the memory store in front of a built-in demo API and prints commands to try.\n")
	addr := fs.String("listen", "127.0.0.1:8080", "the proxy's address")
	adminAddr := fs.String("admin-listen", "127.0.0.1:9090", "the admin listener's address")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := cliflags.Parse(fs, args, stdout, stderr); err != nil {
		return flagErr(err)
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}

	// The demo upstream: a legacy carts/orders API that counts its writes.
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("demo upstream: %w", err)
	}
	api := demo.New(demo.Options{})
	upSrv := app.NewServer(api, log)
	go upSrv.Serve(upLn)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		upSrv.Shutdown(sctx)
	}()

	cfg, err := config.Parse(demoConfig)
	if err != nil {
		return fmt.Errorf("demo config: %w", err)
	}
	cfg.Upstream.URL = "http://" + upLn.Addr().String()
	cfg.Listen, cfg.AdminListen = *addr, *adminAddr
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("demo config: %w", err)
	}
	lns, err := app.Listen(cfg.Listen, cfg.AdminListen)
	if err != nil {
		return err
	}
	app.SetRedisLogger(log)
	a, err := app.New(cfg, app.Options{Logger: log, Version: version, Revision: buildRevision()})
	if err != nil {
		lns.Public.Close()
		lns.Admin.Close()
		return err
	}
	printDemo(stdout, "http://"+lns.Public.Addr().String(), "http://"+upLn.Addr().String(), "http://"+lns.Admin.Addr().String())
	return a.Serve(ctx, 5*time.Second, lns)
}

// demoCommands are the lines `idemgate demo` prints; its test runs them.
func demoCommands(proxy string) []string {
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

func printDemo(w io.Writer, proxy, upstream, admin string) {
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
	for i, c := range demoCommands(proxy) {
		fmt.Fprintf(w, "  %s\n  %s\n\n", notes[i], c)
	}
	fmt.Fprintln(w, "Ctrl-C stops the demo.")
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}
