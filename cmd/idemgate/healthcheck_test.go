package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/app"
	"github.com/idemgate/idemgate/internal/testutil"
)

// TestHealthcheck probes an admin listener in each of its states (the
// statuses internal/app's TestHealth pins): only a 2xx succeeds.
func TestHealthcheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		status  int // what the listener answers on path
		path    string
		wantErr bool
	}{
		{name: "ready", status: 200, path: "/readyz"},
		{name: "starting", status: 503, path: "/readyz", wantErr: true},
		{name: "alive", status: 200, path: "/healthz"},
		{name: "unknown path", status: 404, path: "/nope", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != tt.path {
					t.Errorf("probed %s; want %s", r.URL.Path, tt.path)
				}
				w.WriteHeader(tt.status)
			}))
			defer srv.Close()
			var out, errOut bytes.Buffer
			args := []string{"healthcheck", "--addr", srv.Listener.Addr().String(), "--path", tt.path}
			err := run(context.Background(), args, &out, &errOut)
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("healthcheck %s = %v; want error %v (stderr %q)", tt.path, err, tt.wantErr, errOut.String())
			}
			if err == nil && !strings.Contains(out.String(), ": 200") {
				t.Errorf("healthcheck printed %q; want the URL and 200", out.String())
			}
		})
	}
}

func TestHealthcheckNoListener(t *testing.T) {
	t.Parallel()
	addr := testutil.DeadAddr(t)
	if err := run(context.Background(), []string{"healthcheck", "--addr", addr}, io.Discard, io.Discard); err == nil {
		t.Fatalf("healthcheck against a closed port = nil; want an error")
	}
}

func TestHealthcheckRedirectIsFailure(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.RedirectHandler("/healthz", http.StatusFound))
	defer srv.Close()
	err := run(context.Background(), []string{"healthcheck", "--addr", srv.Listener.Addr().String()}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "302") {
		t.Fatalf("healthcheck on a redirect = %v; want an error naming 302", err)
	}
}

func TestHealthcheckUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"healthcheck", "--path", "readyz"},
		{"healthcheck", "extra"},
		{"healthcheck", "--bogus"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard); err != errUsage {
			t.Errorf("run(%q) = %v; want errUsage", args, err)
		}
	}
}

func TestAdminAddr(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	withAdmin := filepath.Join(dir, "admin.yaml")
	if err := os.WriteFile(withAdmin, []byte("upstream: {url: \"http://127.0.0.1:3000\"}\nadmin_listen: \"127.0.0.1:9191\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	without := filepath.Join(dir, "plain.yaml")
	if err := os.WriteFile(without, []byte("upstream: {url: \"http://127.0.0.1:3000\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "IDEMGATE_ADMIN_LISTEN" {
				return v
			}
			return ""
		}
	}
	tests := []struct {
		name, flag, config, env, want string
		wantErr                       bool
	}{
		{name: "default", want: ":9090"},
		{name: "flag wins", flag: ":7000", config: withAdmin, env: ":8000", want: ":7000"},
		{name: "env over config", config: withAdmin, env: ":8000", want: ":8000"},
		{name: "config", config: withAdmin, want: "127.0.0.1:9191"},
		{name: "config without admin_listen", config: without, want: ":9090"},
		{name: "missing config", config: filepath.Join(dir, "absent.yaml"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := app.AdminAddr(tt.flag, tt.config, env(tt.env))
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("adminAddr = %q, %v; want error %v", got, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("adminAddr = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestProbeURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		listen, want string
		wantErr      bool
	}{
		{listen: ":9090", want: "http://127.0.0.1:9090/readyz"},
		{listen: "0.0.0.0:9090", want: "http://127.0.0.1:9090/readyz"},
		{listen: "[::]:9090", want: "http://[::1]:9090/readyz"},
		{listen: "10.1.2.3:9090", want: "http://10.1.2.3:9090/readyz"},
		{listen: "localhost:9090", want: "http://localhost:9090/readyz"},
		{listen: "9090", wantErr: true},
		{listen: "127.0.0.1:", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.listen, func(t *testing.T) {
			t.Parallel()
			got, err := app.ProbeURL(tt.listen, "/readyz")
			if gotErr := err != nil; gotErr != tt.wantErr {
				t.Fatalf("probeURL(%q) = %q, %v; want error %v", tt.listen, got, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("probeURL(%q) = %q; want %q", tt.listen, got, tt.want)
			}
		})
	}
}
