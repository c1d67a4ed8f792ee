package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The dispatch to internal/openapi (which has the real tests): routes
// import writes a config fragment, and validate --against checks a config
// against the same document.
func TestRoutesImportAndAgainst(t *testing.T) {
	t.Parallel()
	spec := "../../internal/openapi/testdata/petstore3/openapi.yaml"
	dir := t.TempDir()
	routes := filepath.Join(dir, "routes.yaml")
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"routes", "import", spec, "--out", routes}, &out, &errOut); err != nil {
		t.Fatalf("routes import = %v\n%s", err, errOut.String())
	}
	frag, err := os.ReadFile(routes)
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "idemgate.yaml")
	if err := os.WriteFile(cfg, append([]byte("upstream: {url: \"http://127.0.0.1:3000\"}\n"), frag...), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"validate", "--against", spec, cfg}, &out, &errOut); err != nil {
		t.Fatalf("validate --against = %v\n%s%s", err, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "11 of 11 write operations protected; 0 of 11 routes match no operation") {
		t.Errorf("validate --against printed:\n%s", out.String())
	}
	// Without the last route, one write is unprotected and the command fails.
	trimmed := frag[:bytes.LastIndex(frag, []byte("  - name:"))]
	if err := os.WriteFile(cfg, append([]byte("upstream: {url: \"http://127.0.0.1:3000\"}\n"), trimmed...), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"validate", "--against", spec, "--config", cfg}, &out, &errOut); err == nil || !strings.Contains(out.String(), "unprotected: #/paths/~1user~1{username}/delete") {
		t.Errorf("validate --against without deleteUser = %v\n%s", err, out.String())
	}
	if err := run(context.Background(), []string{"routes", "export"}, &out, &errOut); err != errUsage {
		t.Errorf("routes export = %v; want errUsage", err)
	}
}
