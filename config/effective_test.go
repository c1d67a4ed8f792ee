package config

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestEffectiveYAML: the effective config merges defaults, the file and
// the environment, reads back as the same Config, and never shows the
// Redis password; *_env keys show the variable's name.
func TestEffectiveYAML(t *testing.T) {
	t.Setenv("IDEMGATE_STORE_REDIS_PASSWORD", "hunter2-secret")
	t.Setenv("IDEMGATE_SESSIONS_QUEUE_DEPTH", "7")
	c, err := Parse([]byte(`
upstream: {url: "http://127.0.0.1:3000"}
idempotency: {encryption_key_env: MY_KEY_VAR, tenant_hosts: {"a.example": t1}}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true, rate_limit: {requests: 5, per: 1s}}
`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.EffectiveYAML()
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	if strings.Contains(out, "hunter2-secret") || !strings.Contains(out, "password: "+Redacted) {
		t.Errorf("password not redacted:\n%s", out)
	}
	for _, want := range []string{
		"queue_depth: 7",                 // environment
		"encryption_key_env: MY_KEY_VAR", // file; a variable's name
		"timeout: 500ms",                 // default (store.redis.timeout)
		"max_entries: 1000000",           // default
		"url: http://127.0.0.1:3000",     // file
		"tracing:\n  enabled: false",     // default
	} {
		if !strings.Contains(out, want) {
			t.Errorf("effective config lacks %q:\n%s", want, out)
		}
	}
	// It reads back as the same config (but the password).
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatalf("effective config is not YAML: %v", err)
	}
	t.Setenv("IDEMGATE_STORE_REDIS_PASSWORD", "")
	back, err := Parse(b)
	if err != nil {
		t.Fatalf("effective config does not parse back: %v\n%s", err, out)
	}
	back.Store.Redis.Password = c.Store.Redis.Password
	b2, _ := back.EffectiveYAML()
	if string(b2) != out {
		t.Errorf("effective config changes when read back:\n%s\n---\n%s", out, b2)
	}
}
