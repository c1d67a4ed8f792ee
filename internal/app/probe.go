package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/idemgate/idemgate/config"
)

// The healthcheck subcommand's probe of a running idemgate's admin
// listener (for a Docker HEALTHCHECK: distroless has no curl).

// AdminAddr picks the admin listen address: flagAddr, then the
// IDEMGATE_ADMIN_LISTEN variable, then configPath's admin_listen (which
// [config.Load] also overrides from the environment), then the default.
func AdminAddr(flagAddr, configPath string, getenv func(string) string) (string, error) {
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

// ProbeURL turns a listen address into the URL to probe: a missing or
// unspecified host becomes loopback, since the probe runs in the same
// network namespace as the listener.
func ProbeURL(listen, path string) (string, error) {
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

// Probe sends one GET without following redirects or using a proxy from the
// environment (HTTP_PROXY must not turn a local probe into a remote one),
// and returns the status.
func Probe(ctx context.Context, target string) (int, error) {
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
