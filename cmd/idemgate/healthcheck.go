package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/idemgate/idemgate/config"
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
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "admin listener address (default: $IDEMGATE_ADMIN_LISTEN, else --config's admin_listen, else :9090)")
	path := fs.String("config", "", "config file to read admin_listen from (optional)")
	probe := fs.String("path", "/readyz", "path to probe: /readyz (ready for traffic) or /healthz (alive)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "idemgate healthcheck: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	if !strings.HasPrefix(*probe, "/") {
		fmt.Fprintf(stderr, "idemgate healthcheck: --path %q must start with /\n", *probe)
		return errUsage
	}
	listen, err := adminAddr(*addr, *path, os.Getenv)
	if err != nil {
		return err
	}
	target, err := probeURL(listen, *probe)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	status, err := get(ctx, target)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	if status < 200 || status > 299 {
		return fmt.Errorf("healthcheck: %s answered %d", target, status)
	}
	fmt.Fprintf(stdout, "%s: %d\n", target, status)
	return nil
}

// adminAddr picks the admin listen address: flagAddr, then the
// IDEMGATE_ADMIN_LISTEN variable, then configPath's admin_listen (which
// [config.Load] also overrides from the environment), then the default.
func adminAddr(flagAddr, configPath string, getenv func(string) string) (string, error) {
	if flagAddr != "" {
		return flagAddr, nil
	}
	if v := getenv(config.EnvPrefix + "_ADMIN_LISTEN"); v != "" {
		return v, nil
	}
	if configPath != "" {
		cfg, err := config.Load(configPath)
		if err != nil {
			return "", fmt.Errorf("healthcheck: %s: %w", configPath, err)
		}
		if cfg.AdminListen != "" {
			return cfg.AdminListen, nil
		}
	}
	return config.Default().AdminListen, nil
}

// probeURL turns a listen address into the URL to probe: a missing or
// unspecified host becomes loopback, since the probe runs in the same
// network namespace as the listener.
func probeURL(listen, path string) (string, error) {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("healthcheck: admin address %q: %w", listen, err)
	}
	if port == "" {
		return "", fmt.Errorf("healthcheck: admin address %q has no port", listen)
	}
	switch ip := net.ParseIP(host); {
	case host == "":
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified() && ip.To4() != nil:
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}

// get sends one GET without following redirects or using a proxy from the
// environment (HTTP_PROXY must not turn a local probe into a remote one),
// and returns the status.
func get(ctx context.Context, target string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, err
	}
	client := &http.Client{
		Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue interface{ Timeout() bool }
		if errors.As(err, &ue) && ue.Timeout() {
			return 0, fmt.Errorf("%s: no answer in time", target)
		}
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, nil
}
