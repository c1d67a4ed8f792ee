package config

import (
	"reflect"
	"slices"
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
		if !sameValue(fa, fb) {
			*out = append(*out, key)
		}
	}
}

// sameValue reports whether a and b are deeply equal, an empty list or map
// being the same as none (a file that writes "domains: []" changes nothing
// against the default).
func sameValue(a, b reflect.Value) bool {
	switch a.Kind() {
	case reflect.Slice, reflect.Map:
		if a.Len() == 0 && b.Len() == 0 {
			return true
		}
	}
	return reflect.DeepEqual(a.Interface(), b.Interface())
}

// restartOnly is the one list of the keys that need a restart (DESIGN.md,
// Config): the listeners (tls.http_listen among them), tls.mode (it decides
// whether the public listener speaks TLS at all), the store backend and its Redis
// connection (a live prefix or db change would hide every record), the
// limiter backend and the tracing exporter, and nothing else. Every other
// key reloads live: a new key reloads by default, and TestEveryKeyReloads
// (internal/app) proves that each one reaches the running process.
// docs/config.md names the same list.
var restartOnly = []string{
	"listen",
	"admin_listen",
	"tls.http_listen",
	"tls.mode",
	"store.backend",
	// Every store.redis key but record_format and timeout
	// (reloadableRedis).
	"store.redis.*",
	"limiter.backend",
	"tracing.enabled",
}

// reloadableRedis are the store.redis keys that reload live: the record
// format new records are written in, and the timeout, which every Redis
// client reads as each call starts (redisstore.Timeout).
var reloadableRedis = []string{"store.redis.record_format", "store.redis.timeout"}

// RestartOnly reports whether a changed key (as [ChangedKeys] names it)
// needs a restart: whether it is on the short list of DESIGN.md's Config.
func RestartOnly(key string) bool {
	for _, k := range restartOnly {
		if prefix, ok := strings.CutSuffix(k, "*"); ok {
			if strings.HasPrefix(key, prefix) && !slices.Contains(reloadableRedis, key) {
				return true
			}
		} else if k == key {
			return true
		}
	}
	return false
}

// Keys returns every key of [Config] as [ChangedKeys] names them: each leaf
// of its sections, in the order of the fields (a list or a map is one key).
func Keys() []string {
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if name == "" || name == "-" {
				continue
			}
			if prefix != "" {
				name = prefix + "." + name
			}
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type, name)
				continue
			}
			out = append(out, name)
		}
	}
	walk(reflect.TypeFor[Config](), "")
	return out
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
