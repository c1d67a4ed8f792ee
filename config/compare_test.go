package config

import (
	"strings"
	"testing"
)

// compareBase is a valid config; compareCase edits replace its lines.
const compareBase = `upstream: {url: "http://127.0.0.1:3000", timeout: 1m}
store: {backend: memory, redis: {key_prefix: "a:"}}
limiter: {backend: redis}
idempotency: {require_identity: false, late_answer_wait: 0s, max_lease: 5m}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true, timeout: 30s}
  - {name: gql, method: POST, path: /graphql, idempotent: true}
  - {name: get, method: GET, path: /things}
`

// TestCompare: the keys a reload applies or defers, the mix it refuses,
// and each change that affects retries of earlier writes (and those that
// do not), for validate --diff and the reload's log alike.
func TestCompare(t *testing.T) {
	t.Parallel()
	parse := func(t *testing.T, yaml string) *Config {
		t.Helper()
		c, err := Parse([]byte(yaml))
		if err == nil {
			err = c.Validate()
		}
		if err != nil {
			t.Fatalf("%v\n%s", err, yaml)
		}
		return c
	}
	old := parse(t, compareBase)
	for _, tc := range []struct {
		name          string
		from, to      string // a replacement in compareBase
		live, restart string
		refused       bool
		effect        string // a part of the one effect, "" for none
	}{
		{name: "nothing", from: "", to: ""},
		{name: "a live key", from: "max_lease: 5m", to: "max_lease: 5m, drop_headers: [Set-Cookie]", live: "idempotency.drop_headers"},
		{name: "a once restart key, now live", from: "max_lease: 5m", to: "max_lease: 6m", live: "idempotency.max_lease"},
		{name: "a restart key", from: `key_prefix: "a:"`, to: `key_prefix: "a:", username: u`, restart: "store.redis.username"},
		{name: "a mix a reload refuses", from: "path: /things}", to: "path: /things, rate_limit: {requests: 1, per: 1500ns}}", restart: "limiter.backend", live: "routes", refused: true},
		{name: "fingerprint_ignore", from: "timeout: 30s}", to: "timeout: 30s, fingerprint_ignore: [/meta]}", live: "routes", effect: "route pay: fingerprint_ignore can change"},
		{name: "protocol", from: "path: /graphql, idempotent: true}", to: "path: /graphql, idempotent: true, protocol: graphql}", live: "routes", effect: "route gql: protocol can change"},
		{name: "identity", from: "max_lease: 5m}", to: "max_lease: 5m, identity_headers: [X-User]}", live: "idempotency.identity_headers", effect: "changes the scope"},
		{name: "tenant", from: "max_lease: 5m}", to: "max_lease: 5m, tenant: shop-2}", live: "idempotency.tenant", effect: "idempotency.tenant changes the scope"},
		{name: "key header", from: "max_lease: 5m}", to: "max_lease: 5m, header: X-Idempotency-Key}", live: "idempotency.header", effect: "a retry that still sends its key in Idempotency-Key"},
		{name: "key prefix", from: `key_prefix: "a:"`, to: `key_prefix: "b:"`, restart: "store.redis.key_prefix", effect: "changes where records are kept"},
		{name: "redis db", from: `key_prefix: "a:"`, to: `key_prefix: "a:", db: 2`, restart: "store.redis.db", effect: "store.redis.db changes where records are kept"},
		{name: "redis addrs, memory store", from: `key_prefix: "a:"`, to: `key_prefix: "a:", addrs: ["127.0.0.1:7000"]`, restart: "store.redis.addrs"},
		{name: "record format (both are read)", from: `key_prefix: "a:"`, to: `key_prefix: "a:", record_format: hash`, live: "store.redis.record_format"},
		{name: "compression (both are read)", from: "backend: memory,", to: "backend: memory, compression: zstd,", live: "store.compression"},
		{name: "a route's timeout", from: "timeout: 30s}", to: "timeout: 40s}", live: "routes"},
		{name: "a new route", from: "  - {name: get,", to: "  - {name: new, method: POST, path: /new, idempotent: true, fingerprint_ignore: [/a]}\n  - {name: get,", live: "routes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := strings.Replace(compareBase, tc.from, tc.to, 1)
			if tc.refused {
				// A limit in nanoseconds, which the file's local limiter
				// takes and the running Redis one does not.
				yaml = strings.Replace(yaml, "limiter: {backend: redis}", "limiter: {backend: local}", 1)
			}
			next := parse(t, yaml)
			d := Compare(old, next)
			if got := strings.Join(d.Live, ","); got != tc.live {
				t.Errorf("Live = %q; want %q", got, tc.live)
			}
			if got := strings.Join(d.Restart, ","); got != tc.restart {
				t.Errorf("Restart = %q; want %q", got, tc.restart)
			}
			if (d.Refused != nil) != tc.refused {
				t.Errorf("Refused = %v; want refused %v", d.Refused, tc.refused)
			}
			if tc.refused && !strings.Contains(d.Refused.Error(), "routes[2].rate_limit.per") {
				t.Errorf("Refused = %v; want it to name routes[2].rate_limit.per", d.Refused)
			}
			switch {
			case tc.effect == "" && len(d.Effects) > 0:
				t.Errorf("Effects = %q; want none", d.Effects)
			case tc.effect != "" && (len(d.Effects) != 1 || !strings.Contains(d.Effects[0], tc.effect)):
				t.Errorf("Effects = %q; want one with %q", d.Effects, tc.effect)
			}
		})
	}
}
