package config

import (
	"reflect"
	"strings"
)

// ChangedKeys returns the keys whose values differ between a and b, as
// dotted paths of their YAML names ("store.backend", "idempotency.lease",
// "routes"), sorted by the order of the fields in [Config]. Structs are
// compared field by field; lists and maps as a whole (a change anywhere in
// routes is "routes").
func ChangedKeys(a, b *Config) []string {
	if a == nil || b == nil {
		return nil
	}
	var out []string
	diffStruct(reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem(), "", &out)
	return out
}

func diffStruct(a, b reflect.Value, prefix string, out *[]string) {
	t := a.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
		if name == "" || name == "-" {
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		fa, fb := a.Field(i), b.Field(i)
		if f.Type.Kind() == reflect.Struct {
			diffStruct(fa, fb, key, out)
			continue
		}
		if !reflect.DeepEqual(fa.Interface(), fb.Interface()) {
			*out = append(*out, key)
		}
	}
}

// RestartOnly reports whether a changed key (as [ChangedKeys] names it)
// needs a restart: the listeners, TLS, the store, the client address rule,
// the idempotency settings that decide record keys, leases and sizes, and
// the limiters' backend. Routes, mode, errors, the upstream, edge_limit,
// the other limiter keys, sessions, the identity (its sources and
// require_identity) and the idempotency settings a route may override
// with its own (retention, in_progress, wait_timeout, late_answer_wait,
// release_statuses and drop_headers, applied to the routes that inherit
// them), late_answer_max and extra_methods are reloaded.
func RestartOnly(key string) bool {
	switch {
	case key == "routes", key == "extra_methods", key == "mode", key == "errors", strings.HasPrefix(key, "errors."),
		key == "idempotency.require_identity", key == "idempotency.identity_headers",
		strings.HasPrefix(key, "idempotency.identity."),
		strings.HasPrefix(key, "upstream."),
		key == "idempotency.retention", key == "idempotency.in_progress", key == "idempotency.wait_timeout",
		key == "idempotency.late_answer_wait", key == "idempotency.late_answer_max", key == "idempotency.unknown_outcome",
		key == "idempotency.release_statuses", key == "idempotency.drop_headers",
		key == "idempotency.reuse_status", key == "idempotency.replay_header",
		key == "idempotency.max_body_bytes", key == "request_body_timeout", key == "idempotency.header",
		key == "idempotency.key_syntax", key == "idempotency.max_waiters", key == "request_id_header",
		key == "profile", key == "idempotency.allow_shared_accounts",
		strings.HasPrefix(key, "edge_limit."),
		strings.HasPrefix(key, "sessions."),
		key == "store.redis.record_format", key == "store.compression",
		strings.HasPrefix(key, "limiter.") && key != "limiter.backend":
		return false
	}
	return true
}

// WithKeys returns a copy of c with the values of keys (as [ChangedKeys]
// names them) taken from from: a reload keeps what only a restart applies.
func (c *Config) WithKeys(from *Config, keys []string) *Config {
	out := *c
	dst, src := reflect.ValueOf(&out).Elem(), reflect.ValueOf(from).Elem()
	for _, k := range keys {
		d, s := dst, src
		for part := range strings.SplitSeq(k, ".") {
			d, s = fieldByTag(d, part), fieldByTag(s, part)
		}
		if d.IsValid() && s.IsValid() {
			d.Set(s)
		}
	}
	return &out
}

// fieldByTag returns v's field whose mapstructure name is name.
func fieldByTag(v reflect.Value, name string) reflect.Value {
	if !v.IsValid() || v.Kind() != reflect.Struct {
		return reflect.Value{}
	}
	t := v.Type()
	for i := range t.NumField() {
		if tag, _, _ := strings.Cut(t.Field(i).Tag.Get("mapstructure"), ","); tag == name {
			return v.Field(i)
		}
	}
	return reflect.Value{}
}
