package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/cliflags"
)

// runHealthcheck probes the admin listener of a running idemgate and
// succeeds only on a 2xx answer. It is for images that want a Docker
// HEALTHCHECK: distroless has no shell and no curl (ecosystem.md §7).
// Kubernetes ignores HEALTHCHECK and uses the chart's httpGet probes.
//
// The address is, first found: --addr, IDEMGATE_ADMIN_LISTEN, the
// admin_listen of --config, the default ":9090". A listen address without
// a host, or with an unspecified one (":9090", "0.0.0.0:9090", "[::]:9090"),
// is probed on loopback.
func runHealthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cliflags.New("healthcheck", "usage: idemgate healthcheck [--addr ADDR | --config FILE] [--path /readyz] [--timeout 3s]\n  Probes the admin listener; exits 0 when it answers 200.\n")
	addr := fs.String("addr", "", "admin listener address (default: $IDEMGATE_ADMIN_LISTEN, else --config's admin_listen, else :9090)")
	path := fs.String("config", "", "config file to read admin_listen from (optional)")
	probe := fs.String("path", "/readyz", "path to probe: /readyz (ready for traffic) or /healthz (alive)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := cliflags.Parse(fs, args, stdout, stderr); err != nil {
		return flagErr(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "idemgate healthcheck: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	if !strings.HasPrefix(*probe, "/") {
		fmt.Fprintf(stderr, "idemgate healthcheck: --path %q must start with /\n", *probe)
		return errUsage
	}
	listen, err := app.AdminAddr(*addr, *path, os.Getenv)
	if err != nil {
		return err
	}
	target, err := app.ProbeURL(listen, *probe)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	status, err := app.Probe(ctx, target)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	if status < 200 || status > 299 {
		return fmt.Errorf("healthcheck: %s answered %d", target, status)
	}
	fmt.Fprintf(stdout, "%s: %d\n", target, status)
	return nil
}
