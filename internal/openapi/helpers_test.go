package openapi

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/config"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// golden compares got with testdata/golden/name, or rewrites it with
// -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n%s", name, UnifiedDiff("want", "got", want, got))
	}
}

// knownKeys are the mapstructure keys of a config struct type.
func knownKeys(t reflect.Type) map[string]reflect.Type {
	keys := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if tag := f.Tag.Get("mapstructure"); tag != "" {
			keys[strings.Split(tag, ",")[0]] = f.Type
		}
	}
	return keys
}

// validateConfig checks generated routes the way idemgate will: under an
// upstream, through config.Parse and Validate. Keys that config.Config does
// not know yet (DESIGN.md's per-route retention, in_progress and
// rate_limit.by, and path_case, each being added on another branch) are
// removed first and returned, so the test keeps proving everything that
// config can check today and checks those keys as soon as they exist.
func validateConfig(t *testing.T, fragment []byte) (*config.Config, []string) {
	t.Helper()
	// A verified JWT identity, so that `x-ratelimit: {by: identity}` (which
	// counts verified identities only) is a valid choice.
	jwt := map[string]any{"jwks_file": "/nonexistent/jwks.json"}
	data, dropped := knownOnly(t, fragment, map[string]any{
		"upstream":    map[string]any{"url": "http://127.0.0.1:1"},
		"idempotency": map[string]any{"identity": map[string]any{"jwt": jwt}},
	})
	cfg, err := config.Parse(data)
	if err != nil {
		t.Fatalf("config.Parse: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config.Validate:\n%v", err)
	}
	return cfg, dropped
}

// knownOnly is fragment with the keys config does not know yet removed
// (returned), and the top-level keys of extra added.
func knownOnly(t *testing.T, fragment []byte, extra map[string]any) ([]byte, []string) {
	t.Helper()
	var doc map[string]any
	if err := yaml.Unmarshal(fragment, &doc); err != nil {
		t.Fatalf("generated YAML does not parse: %v\n%s", err, fragment)
	}
	var dropped []string
	top := knownKeys(reflect.TypeFor[config.Config]())
	route := knownKeys(reflect.TypeFor[config.Route]())
	rl := knownKeys(reflect.TypeFor[config.RateLimit]())
	for k := range doc {
		if _, ok := top[k]; !ok {
			dropped = append(dropped, k)
			delete(doc, k)
		}
	}
	routes, _ := doc["routes"].([]any)
	for _, r := range routes {
		m := r.(map[string]any)
		for k := range m {
			if _, ok := route[k]; !ok {
				dropped = append(dropped, "routes[]."+k)
				delete(m, k)
			}
		}
		if lim, ok := m["rate_limit"].(map[string]any); ok {
			for k := range lim {
				if _, ok := rl[k]; !ok {
					dropped = append(dropped, "routes[].rate_limit."+k)
					delete(lim, k)
				}
			}
		}
	}
	for k, v := range extra {
		doc[k] = v
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return data, dropped
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
