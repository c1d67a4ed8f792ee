package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/cliflags"
	"github.com/idemgate/idemgate/internal/demo"
)

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

	cfg, err := config.Parse(demo.Config())
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
	demo.PrintIntro(stdout, "http://"+lns.Public.Addr().String(), "http://"+upLn.Addr().String(), "http://"+lns.Admin.Addr().String())
	return a.Serve(ctx, 5*time.Second, lns)
}
