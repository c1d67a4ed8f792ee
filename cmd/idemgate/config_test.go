package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelp: --help, -h and help print the usage with every subcommand on
// stdout and succeed; an unknown command fails.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, &out, &errOut); err != nil {
			t.Errorf("%v = %v; want success", args, err)
		}
		for _, sub := range []string{"demo", "validate", "healthcheck", "config", "routes import", "version"} {
			if !strings.Contains(out.String(), "idemgate "+sub) {
				t.Errorf("%v: usage lacks %q:\n%s", args, sub, out.String())
			}
		}
	}
	if err := run(context.Background(), []string{"nope"}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Error("an unknown command succeeded")
	}
}

// TestConfigCommand: `idemgate config --config FILE` prints the defaults,
// the file and the environment merged, with the Redis password and the
// admin token redacted, and warns about unknown IDEMGATE_* variables.
func TestConfigCommand(t *testing.T) {
	t.Setenv("IDEMGATE_STORE_REDIS_PASSWORD", "pw-secret-31")
	t.Setenv("IDEMGATE_ADMIN_TOKEN", "token-secret-0123456789")
	t.Setenv("IDEMGATE_EDGE_LIMIT_RATE", "7")
	t.Setenv("IDEMGATE_UPSTREAM_TIMOUT", "5s")
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("upstream: {url: \"http://127.0.0.1:3000\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"config", "--config", p}, &out, &errOut); err != nil {
		t.Fatalf("config = %v; stderr %s", err, errOut.String())
	}
	s := out.String()
	for _, want := range []string{"url: http://127.0.0.1:3000", "rate: 7", "password: <redacted>", "IDEMGATE_ADMIN_TOKEN: set (<redacted>)", "max_lease: 1h0m0s"} {
		if !strings.Contains(s, want) {
			t.Errorf("config output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "pw-secret-31") || strings.Contains(s, "token-secret") {
		t.Errorf("config output shows a secret:\n%s", s)
	}
	if !strings.Contains(errOut.String(), "IDEMGATE_UPSTREAM_TIMOUT") || !strings.Contains(errOut.String(), "IDEMGATE_UPSTREAM_TIMEOUT") {
		t.Errorf("stderr lacks the unknown variable's warning with the nearest name: %s", errOut.String())
	}
}
