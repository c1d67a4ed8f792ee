package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzCheck: no document makes Check (the key and kind pass over the YAML,
// viper's decoding, the validator) panic, and a document it accepts prints
// as an effective config that it accepts again, unchanged.
func FuzzCheck(f *testing.F) {
	examples, _ := filepath.Glob(filepath.Join("..", "examples", "*.yaml"))
	for _, p := range examples {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		"upstream: {url: \"http://x\"}\nRoutes: []\n",
		"upstream: {url: \"http://x\"}\nroutes: {a: {method: POST}}\n",
		"upstream: {url: \"http://x\"}\nidempotency: {replay_header: 5}\n",
		"a: &x {b: 1}\nupstream:\n  <<: *x\n",
		"upstream: {url: \"http://x\"}\nextra_methods: [PURGE]\nroutes: [{name: p, method: PURGE, path: /p}]\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Check(data)
		if err != nil {
			return
		}
		out, err := c.EffectiveYAML()
		if err != nil {
			t.Fatalf("EffectiveYAML: %v", err)
		}
		back, err := Check(out)
		if err != nil {
			t.Fatalf("the effective config of an accepted document is refused: %v\n%s", err, out)
		}
		if again, _ := back.EffectiveYAML(); string(again) != string(out) {
			t.Fatalf("the effective config changes when read back:\n%s\n---\n%s", out, again)
		}
	})
}
