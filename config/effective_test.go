package config

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestEffectiveYAML: the effective config merges defaults, the file and
// the environment, reads back as the same Config, and never shows the
// Redis password or the sentinels'; *_env keys show the variable's name.
func TestEffectiveYAML(t *testing.T) {
	t.Setenv("IDEMGATE_STORE_REDIS_PASSWORD", "hunter2-secret")
	t.Setenv("IDEMGATE_STORE_REDIS_SENTINEL_PASSWORD", "hunter3-sentinel")
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
	if strings.Contains(out, "hunter2-secret") || !strings.Contains(out, "\n    password: "+Redacted) {
		t.Errorf("password not redacted:\n%s", out)
	}
	if strings.Contains(out, "hunter3-sentinel") || !strings.Contains(out, "sentinel_password: "+Redacted) {
		t.Errorf("sentinel password not redacted:\n%s", out)
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
	t.Setenv("IDEMGATE_STORE_REDIS_SENTINEL_PASSWORD", "")
	back, err := Parse(b)
	if err != nil {
		t.Fatalf("effective config does not parse back: %v\n%s", err, out)
	}
	back.Store.Redis.Password = c.Store.Redis.Password
	back.Store.Redis.SentinelPassword = c.Store.Redis.SentinelPassword
	b2, _ := back.EffectiveYAML()
	if string(b2) != out {
		t.Errorf("effective config changes when read back:\n%s\n---\n%s", out, b2)
	}
}

// TestEffectiveYAMLDefaults: where a default applies to an unset key, the
// effective config shows the value that applies, not an empty list.
func TestEffectiveYAMLDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		want       []string
		wantNot    []string
	}{
		{
			name: "defaults",
			yaml: `
upstream: {url: "http://127.0.0.1:3000"}
routes: [{name: pay, method: POST, path: /pay, idempotent: true}]`,
			want: []string{
				"  identity:\n    headers:\n      - Authorization\n",
				"      algorithms:\n        - RS256\n        - ES256\n        - EdDSA\n",
				"    timeout: 1m0s\n", "    mode: enforce\n", "    retention: 25h0m0s\n",
				"    in_progress: reject\n", "    wait_timeout: 10s\n",
				"    release_statuses:\n      - 307\n",
			},
			wantNot: []string{"release_statuses: []", "identity_headers", "\n    headers: []"},
		},
		{
			name: "old spelling",
			yaml: `
upstream: {url: "http://127.0.0.1:3000"}
idempotency: {identity_headers: [X-Api-Key]}`,
			want:    []string{"  identity:\n    headers:\n      - X-Api-Key\n"},
			wantNot: []string{"identity_headers"},
		},
		{
			name: "route's own",
			yaml: `
upstream: {url: "http://127.0.0.1:3000"}
routes: [{name: pay, method: POST, path: /pay, idempotent: true, release_statuses: [503], timeout: 5s}]`,
			want: []string{"    timeout: 5s\n", "    release_statuses:\n      - 503\n    drop_headers: []\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Check([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			b, err := c.EffectiveYAML()
			if err != nil {
				t.Fatal(err)
			}
			out := string(b)
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("effective config lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("effective config shows %q:\n%s", w, out)
				}
			}
			back, err := Check(b)
			if err != nil {
				t.Fatalf("effective config is not valid: %v\n%s", err, out)
			}
			if b2, _ := back.EffectiveYAML(); string(b2) != out {
				t.Errorf("effective config changes when read back:\n%s\n---\n%s", out, b2)
			}
		})
	}
}
