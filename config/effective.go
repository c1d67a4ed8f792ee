package config

import (
	"bytes"
	"cmp"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Redacted replaces a secret's value in [Config.EffectiveYAML].
const Redacted = "<redacted>"

// secretKeys are the keys whose values are secrets. The *_env keys name a
// variable, not its value: they are printed as they are.
var secretKeys = map[string]bool{
	"store.redis.password":          true,
	"store.redis.sentinel_password": true,
}

// unsetKeys are keys whose absence means something else than an empty
// list, shown only when set: an old spelling of another key, and a
// non-idempotent route's keyed-write policy (set even empty, it is refused).
var unsetKeys = map[string]bool{
	"idempotency.identity_headers": true,
	"routes.release_statuses":      true,
	"routes.drop_headers":          true,
}

// EffectiveYAML returns c as YAML, every key in the order of the reference,
// with secrets (store.redis.password, store.redis.sentinel_password)
// replaced by [Redacted]: what
// `idemgate config` prints, so that the defaults, the file and the
// environment can be seen merged. Values that apply by default where a key
// is unset are shown as they apply: the identity's sources (the
// Authorization header when none is configured; the old identity_headers
// spelling as identity.headers), each route's timeout and mode, and each
// idempotent route's retention, release_statuses, drop_headers,
// in_progress and wait_timeout where it inherits them.
func (c *Config) EffectiveYAML() ([]byte, error) {
	return c.EffectiveYAMLSources(nil)
}

// EffectiveYAMLSources is [Config.EffectiveYAML] with each value's source,
// as src tells it (see [Config.Sources]), in a comment on its key's line:
// "# default", "# profile", "# file" or "# env". A nil src adds none.
func (c *Config) EffectiveYAMLSources(src func(key string) string) ([]byte, error) {
	root := effectiveNode(reflect.ValueOf(c.effective()).Elem(), "")
	if src != nil {
		commentSources(root, "", src)
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// effective is a copy of c with the values that apply where c leaves a key
// unset written in (see [Config.EffectiveYAML]).
func (c *Config) effective() *Config {
	e := *c
	id := &e.Idempotency
	id.Identity = c.Idempotency.IdentitySources()
	id.IdentityHeaders = nil
	e.Routes = slices.Clone(c.Routes)
	for i := range e.Routes {
		r := &e.Routes[i]
		r.Timeout = r.EffectiveTimeout(c.Upstream)
		r.Mode = r.EffectiveMode(c.Mode)
		if !r.Idempotent {
			continue // the keyed-write policy applies to idempotent routes only
		}
		r.Retention = cmp.Or(r.Retention, id.Retention)
		r.InProgress = cmp.Or(r.InProgress, id.InProgress)
		r.WaitTimeout = cmp.Or(r.WaitTimeout, id.WaitTimeout)
		if r.ReleaseStatuses == nil {
			r.ReleaseStatuses = id.ReleaseStatuses
		}
		if r.DropHeaders == nil {
			r.DropHeaders = id.DropHeaders
		}
	}
	return &e
}

// commentSources puts the source of each leaf value of the mapping n (the
// value of key) in a line comment on its key.
func commentSources(n *yaml.Node, key string, src func(string) string) {
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		full := joinKey(key, k.Value)
		if v.Kind == yaml.MappingNode && len(v.Content) > 0 && key != "idempotency.tenant_hosts" && full != "idempotency.tenant_hosts" && full != "errors.codes" {
			commentSources(v, full, src)
			continue
		}
		if v.Kind == yaml.ScalarNode || v.Style&yaml.FlowStyle != 0 || len(v.Content) == 0 {
			v.LineComment = src(full)
		} else {
			k.LineComment = src(full)
		}
	}
}

func scalar(tag, v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v} }

// effectiveNode is v (the value of key) as a YAML node.
func effectiveNode(v reflect.Value, key string) *yaml.Node {
	if secretKeys[key] && !v.IsZero() {
		return scalar("!!str", Redacted)
	}
	if v.Type() == durationType {
		return scalar("!!str", time.Duration(v.Int()).String())
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return scalar("!!null", "null")
		}
		return effectiveNode(v.Elem(), key)
	case reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if name == "" || name == "-" || !f.IsExported() || unsetKeys[joinKey(key, name)] && v.Field(i).IsNil() {
				continue
			}
			n.Content = append(n.Content, scalar("!!str", name), effectiveNode(v.Field(i), joinKey(key, name)))
		}
		return n
	case reflect.Map:
		n := &yaml.Node{Kind: yaml.MappingNode}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			n.Content = append(n.Content, scalar("!!str", k.String()), effectiveNode(v.MapIndex(k), joinKey(key, k.String())))
		}
		if len(keys) == 0 {
			n.Style = yaml.FlowStyle
		}
		return n
	case reflect.Slice, reflect.Array:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		for i := range v.Len() {
			n.Content = append(n.Content, effectiveNode(v.Index(i), key))
		}
		if v.Len() == 0 {
			n.Style = yaml.FlowStyle
		}
		return n
	case reflect.String:
		return scalar("!!str", v.String())
	case reflect.Bool:
		return scalar("", strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return scalar("", strconv.FormatInt(v.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return scalar("", strconv.FormatUint(v.Uint(), 10))
	case reflect.Float32, reflect.Float64:
		return scalar("", strconv.FormatFloat(v.Float(), 'g', -1, 64))
	}
	return scalar("!!str", "")
}
