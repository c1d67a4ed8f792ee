package config

import (
	"fmt"
	"slices"
	"strings"
)

// A Diff is what a change from one config to another does, as a reload
// applies it (DESIGN.md, Config reload) and `idemgate validate --diff`
// reports it.
type Diff struct {
	// Live are the changed keys a reload applies; Restart those only a
	// restart applies ([RestartOnly]), as [ChangedKeys] names them.
	Live, Restart []string
	// Refused, when not nil, is why a reload refuses the new config: it is
	// valid on its own, but not with the running values of the Restart
	// keys, which is what a reload would run (a route's timeout checked
	// against the new max_lease, say, served under the running one).
	Refused error
	// Effects says, one sentence each, what the change does to retries of
	// writes made before it: a changed fingerprint makes them conflict, a
	// changed scope or store makes them run again.
	Effects []string
}

// Compare returns what changing from old to next does. Both must be valid.
func Compare(old, next *Config) Diff {
	var d Diff
	for _, k := range ChangedKeys(old, next) {
		if RestartOnly(k) {
			d.Restart = append(d.Restart, k)
		} else {
			d.Live = append(d.Live, k)
		}
	}
	if len(d.Restart) > 0 {
		d.Refused = next.WithKeys(old, d.Restart).Validate()
	}
	d.Effects = effects(old, next)
	return d
}

// effects lists what the change from old to next does to retries of
// earlier writes: the one rule for the reload's log and validate --diff.
func effects(old, next *Config) []string {
	var out []string
	for _, r := range next.Routes {
		i := slices.IndexFunc(old.Routes, func(o Route) bool { return o.Name == r.Name })
		if i < 0 || !r.Idempotent || !old.Routes[i].Idempotent {
			continue
		}
		o := old.Routes[i]
		var what []string
		if !slices.Equal(o.FingerprintIgnore, r.FingerprintIgnore) {
			what = append(what, "fingerprint_ignore")
		}
		if o.Protocol != r.Protocol {
			what = append(what, "protocol")
		}
		if len(what) > 0 {
			out = append(out, fmt.Sprintf("route %s: %s can change its requests' fingerprints: a retry of a write made before, with the same key, may get 409 idempotency_key_reused",
				r.Name, strings.Join(what, " and ")))
		}
	}
	changed := ChangedKeys(old, next)
	has := func(prefixes ...string) []string {
		var keys []string
		for _, k := range changed {
			for _, p := range prefixes {
				if k == p || strings.HasPrefix(k, p+".") {
					keys = append(keys, k)
					break
				}
			}
		}
		return keys
	}
	if keys := has("profile", "idempotency.identity_headers", "idempotency.identity", "idempotency.tenant", "idempotency.tenant_hosts"); len(keys) > 0 {
		out = append(out, fmt.Sprintf("%s changes the scope records are kept under: a retry of a write made before is a new request and runs again", strings.Join(keys, ", ")))
	}
	if keys := has("idempotency.header"); len(keys) > 0 {
		out = append(out, fmt.Sprintf("idempotency.header changes from %s to %s: a retry that still sends its key in %s is not keyed, and runs again (or gets 400 on a require_key route)",
			old.Idempotency.Header, next.Idempotency.Header, old.Idempotency.Header))
	}
	if keys := has("idempotency.key_syntax"); len(keys) > 0 {
		out = append(out, fmt.Sprintf("idempotency.key_syntax changes from %s to %s: a retry's key may read differently (an sf-string key is the string's value) or be refused, and a retry of a write made before may run again",
			old.Idempotency.KeySyntax, next.Idempotency.KeySyntax))
	}
	if keys := has("store.backend", "store.redis.key_prefix", "store.redis.db", "store.redis.master_name"); len(keys) > 0 {
		out = append(out, fmt.Sprintf("%s changes where records are kept: the records written before are not found, and retries of those writes run again", strings.Join(keys, ", ")))
	}
	if keys := has("store.redis.addrs"); len(keys) > 0 && next.Store.Backend == StoreRedis {
		out = append(out, "store.redis.addrs changes: unless the new servers hold the records written before, retries of those writes run again")
	}
	return out
}
