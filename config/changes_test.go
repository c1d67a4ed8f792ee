package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRestartOnly: the keys of DESIGN.md's short list need a restart; every other key, and a key
// that does not exist yet, reloads.
func TestRestartOnly(t *testing.T) {
	t.Parallel()
	restart := []string{
		"listen", "admin_listen", "tls.http_listen", "tls.mode", "store.backend", "limiter.backend", "tracing.enabled",
	}
	for _, key := range Keys() {
		want := slices.Contains(restart, key) ||
			strings.HasPrefix(key, "store.redis.") && key != "store.redis.record_format" && key != "store.redis.timeout"
		if got := RestartOnly(key); got != want {
			t.Errorf("RestartOnly(%q) = %v; want %v", key, got, want)
		}
	}
	for _, key := range []string{"max_header_bytes", "idempotency.encryption_key_env", "tls.cert_file", "tls.on_demand.allow", "store.redis.record_format", "store.redis.timeout", "idempotency.tenant", "idempotency.lease", "a_key_added_later", "store.redisx"} {
		if RestartOnly(key) {
			t.Errorf("RestartOnly(%q) = true; want false", key)
		}
	}
}

// TestWithKeys: the named keys take from's values, nested ones included;
// the others keep c's, and c itself is not changed.
func TestWithKeys(t *testing.T) {
	t.Parallel()
	start, next := Default(), Default()
	next.Listen, next.Idempotency.Lease, next.EdgeLimit.Rate = ":9999", time.Hour, 7
	got := next.WithKeys(start, []string{"listen", "idempotency.lease", "no.such.key"})
	if got.Listen != start.Listen || got.Idempotency.Lease != start.Idempotency.Lease || got.EdgeLimit.Rate != 7 {
		t.Errorf("WithKeys = listen %q, lease %v, edge rate %v; want %q, %v, 7", got.Listen, got.Idempotency.Lease, got.EdgeLimit.Rate, start.Listen, start.Idempotency.Lease)
	}
	if next.Listen != ":9999" {
		t.Errorf("WithKeys changed its receiver")
	}
	if keys := ChangedKeys(start, got); !slices.Equal(keys, []string{"edge_limit.rate"}) {
		t.Errorf("ChangedKeys(start, applied) = %v; want [edge_limit.rate]", keys)
	}
}

// TestChangedKeysEmptyIsNone: an empty list or map is no change against
// none (the effective YAML writes "domains: []" for the default nil).
func TestChangedKeysEmptyIsNone(t *testing.T) {
	t.Parallel()
	a, b := Default(), Default()
	a.TLS.Domains, b.TLS.Domains = nil, []string{}
	a.Idempotency.TenantHosts, b.Idempotency.TenantHosts = nil, map[string]string{}
	if got := ChangedKeys(a, b); len(got) != 0 {
		t.Errorf("ChangedKeys = %v; want none", got)
	}
	b.TLS.Domains = []string{"a.example"}
	if got := ChangedKeys(a, b); !slices.Equal(got, []string{"tls.domains"}) {
		t.Errorf("ChangedKeys = %v; want [tls.domains]", got)
	}
}
