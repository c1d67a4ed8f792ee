package config

import (
	"slices"
	"testing"
	"time"
)

// TestRestartOnly: routes, mode, edge_limit, sessions, the limiter's
// other keys, the identity, the idempotency keys a route may override and
// the others the proxy's stages carry reload; everything else,
// limiter.backend included, needs a restart.
func TestRestartOnly(t *testing.T) {
	t.Parallel()
	for key, want := range map[string]bool{
		"routes": false, "extra_methods": false, "mode": false, "edge_limit.rate": false, "sessions.queue_depth": false,
		"limiter.max_clients": false, "limiter.ietf_headers": false,
		"idempotency.require_identity": false, "idempotency.identity_headers": false,
		"idempotency.identity.cookies": false, "idempotency.identity.jwt.jwks_url": false,
		"idempotency.in_progress": false, "idempotency.wait_timeout": false,
		"idempotency.late_answer_wait": false, "idempotency.late_answer_max": false, "idempotency.unknown_outcome": false,
		"idempotency.release_statuses": false, "idempotency.drop_headers": false,
		"idempotency.header": false, "idempotency.reuse_status": false, "idempotency.replay_header": false,
		"idempotency.max_body_bytes": false, "request_body_timeout": false, "store.redis.record_format": false,
		"store.compression":  false,
		"idempotency.tenant": true, "idempotency.max_response_bytes": true, "idempotency.retention": false,
		"limiter.backend": true, "listen": true, "store.backend": true, "idempotency.lease": true, "upstream.url": false, "upstream.timeout": false, "upstream.host": false,
	} {
		if got := RestartOnly(key); got != want {
			t.Errorf("RestartOnly(%q) = %v; want %v", key, got, want)
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
