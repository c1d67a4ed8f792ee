package openapi

import (
	"encoding/json"

	"fmt"
	yaml "go.yaml.in/yaml/v3"
	"os"
	"path/filepath"
	"testing"
)

// FuzzImportExtensions: whatever an operation's path and extensions say,
// Import does not panic, and the routes it prints are a config that
// config.Parse and Validate accept (a value it cannot use is a problem
// line, never an invalid config).
func FuzzImportExtensions(f *testing.F) {
	f.Add("/carts/{id}", "post", `{"required": true, "session": "id", "retention": "25h", "in_progress": "wait", "fingerprint_ignore": ["/a/b"]}`, `{"requests": 60, "per": "60s", "algorithm": "window", "block": "60s", "by": "header:UCP-Agent"}`)
	f.Add("/a/{x-y}.json", "get", `{"session": {"header": "X-Cart-Id"}}`, `{"requests": 1, "per": 1}`)
	f.Add("/g", "put", `{"protocol": "graphql", "session": {"param": "nope"}}`, `{"requests": 1e30, "per": "-1s"}`)
	f.Add("/a", "delete", `false`, `[]`)
	f.Add("/{a}/{b}", "patch", `{"retention": 1e300}`, `{"per": "1ns", "requests": 3, "by": "identity"}`)
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, path, method, xIdem, xRate string) {
		var idem, rate any
		if json.Unmarshal([]byte(xIdem), &idem) != nil || json.Unmarshal([]byte(xRate), &rate) != nil {
			return
		}
		switch method {
		case "get", "post", "put", "patch", "delete", "head":
		default:
			return
		}
		op := map[string]any{
			"operationId":   "op",
			"x-idempotency": idem,
			"x-ratelimit":   rate,
			"responses":     map[string]any{"200": map[string]any{"description": "ok"}},
		}
		doc := map[string]any{
			"openapi": "3.0.3",
			"info":    map[string]any{"title": "t", "version": "1"},
			"paths":   map[string]any{path: map[string]any{method: op}},
		}
		data, err := json.Marshal(doc)
		if err != nil {
			return
		}
		p := filepath.Join(dir, fmt.Sprintf("spec-%d.json", os.Getpid()))
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		spec, err := LoadSpec(p)
		if err != nil {
			return // the document itself is invalid
		}
		res := Import(spec, Options{})
		validateConfig(t, Render(spec, res))
	})
}

// FuzzMerge: for any config text, Merge either refuses it or returns YAML
// that parses (Merge itself checks that the other keys and the routes came
// out as intended), and that a second Merge leaves unchanged.
func FuzzMerge(f *testing.F) {
	for _, s := range []string{mergeConfig, "", "routes:\n", "routes: []\n", "routes:\n- name: x\n  method: GET\n  path: /x\n",
		"routes:\n    -   name: a   # c\n        method: POST\n        path: '/api/carts'  # q\n        rate_limit: { requests: 1, per: 1s }\n    # next\n",
		"a: 1\nroutes:\n  - {name: b, method: PUT, path: \"/api/carts/{id}\"}\n  -\n    name: c\n    method: DELETE\n    path: /api/carts/{x}\n"} {
		f.Add(s)
	}
	dir := f.TempDir()
	p := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(p, []byte(mergeSpec), 0o644); err != nil {
		f.Fatal(err)
	}
	spec, err := LoadSpec(p)
	if err != nil {
		f.Fatal(err)
	}
	res := Import(spec, Options{})
	f.Fuzz(func(t *testing.T, config string) {
		got, _, err := Merge([]byte(config), res)
		if err != nil {
			return
		}
		var doc map[string]any
		if err := yaml.Unmarshal(got, &doc); err != nil {
			t.Fatalf("merged config does not parse: %v\n--- in\n%s\n--- out\n%s", err, config, got)
		}
		again, _, err := Merge(got, res)
		if err != nil {
			t.Fatalf("second merge: %v\n%s", err, got)
		}
		if string(again) != string(got) {
			t.Fatalf("second merge changed the config:\n%s\n--- in\n%q", UnifiedDiff("first", "second", got, again), config)
		}
	})
}
