package docs

import (
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// layers is DESIGN.md's *Layout* as import direction: a package of the
// module imports only packages of a lower layer (never its own), so that
// the dependencies point one way, from main down to the contracts. A new
// package gets its layer here; TestImportDirection fails until it has one.
var layers = [][]string{
	// 0: leaves, which import nothing of the module.
	{
		"internal/canonform", "internal/canonjson", "internal/clientaddr", "internal/cliflags",
		"internal/connguard", "internal/demo", "internal/errtree", "internal/filewatch",
		"internal/jsonlog", "internal/luascript", "internal/metric", "internal/memlimit", "internal/modes",
		"internal/pathtmpl", "internal/problem", "internal/rediskey", "internal/tick",
		"internal/tracing",
		// test-only helpers, imported by tests alone
		"internal/testutil", "internal/redistest", "tlsconf/storagetest", "tlsconf/tlstest",
	},
	// 1: the contracts.
	{"keystore", "limiter", "session", "tlsconf", "tlsconf/redisstorage"},
	// 2: the backends and decorators of a contract, and the building blocks
	// the proxy and the config share.
	{
		"keystore/compressed", "keystore/memstore", "keystore/metered", "keystore/redisstore",
		"keystore/replaycache", "keystore/sealed", "limiter/redislimiter", "session/redislock",
		"internal/budget", "internal/gql", "internal/identity", "admin",
		"keystore/storetest", // the conformance suite, imported by the backends' tests
	},
	// 3: the pipeline and the config: neither imports the other (the proxy
	// takes a plain Policy the wiring compiles from the config); the
	// console, which reads the admin API's answers as package admin types
	// them.
	{"proxy", "config", "admin/console"},
	// 4: the wiring, and the config's importer.
	{"internal/app", "internal/openapi"},
	// 5: main.
	{"cmd/idemgate"},
}

// TestImportDirection checks every package of the module (its non-test
// files) against layers: what `go list -deps` shows, kept one way.
func TestImportDirection(t *testing.T) {
	const module = "github.com/idemgate/idemgate/"
	layer := map[string]int{}
	for i, pkgs := range layers {
		for _, p := range pkgs {
			layer[p] = i
		}
	}
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		switch {
		case rel == ".":
			return nil
		case strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules":
			return filepath.SkipDir
		}
		if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
			return filepath.SkipDir // a module of its own (the heavy tooling tests)
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files, or only tests
		}
		if pkg.Name == "main" && rel != "cmd/idemgate" || strings.HasPrefix(rel, "internal/docs") {
			return nil // tools and harnesses (bench/, deploy/, test/): not the product
		}
		seen[rel] = true
		mine, ok := layer[rel]
		if !ok {
			t.Errorf("package %s has no layer in layers (layout_test.go): give it one", rel)
			return nil
		}
		for _, imp := range pkg.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if l, known := layer[dep]; !known || l >= mine {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports point down the layers only", rel, mine, dep, l)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range layer {
		if !seen[p] {
			t.Errorf("layers names %s, which is not a package of the module (any more): remove it", p)
		}
	}
}

// TestMainIsSmall keeps cmd/idemgate to flags, signals and subcommands
// (DESIGN.md, Layout): at most 600 lines outside its tests, the rest in
// internal/app (issue 29; it grew back past 600 twice).
func TestMainIsSmall(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "cmd", "idemgate", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines += strings.Count(string(b), "\n")
	}
	if lines > 600 {
		t.Errorf("cmd/idemgate has %d lines outside its tests; want at most 600: move the work into internal/app", lines)
	}
}
