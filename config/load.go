package config

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net/textproto"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// EnvPrefix prefixes the environment variables that override config keys:
// the key store.redis.password is read from IDEMGATE_STORE_REDIS_PASSWORD.
const EnvPrefix = "IDEMGATE"

// keyDelim separates viper's key parts. It is not viper's default "." because
// tenant_hosts keys are host names full of dots, which "." would split into
// nested maps; "|" can appear in no key or host name. The environment
// replacer maps it to "_".
const keyDelim = "|"

// Sentinel errors wrapped by the errors of [Load] and [Parse].
var (
	// ErrUnknownKey means a key that idemgate does not know, often a typo.
	ErrUnknownKey = errors.New("unknown key")
	// ErrDuration means a duration that is not a string with a unit.
	ErrDuration = errors.New("invalid duration")
	// ErrDecode means a value of the wrong type, such as a list where a
	// string belongs.
	ErrDecode = errors.New("invalid value")
)

// envReplacer turns a key into its environment variable's name (after the
// prefix). identity_headers and identity.headers would both be
// IDEMPOTENCY_IDENTITY_HEADERS: that name sets identity.headers (the same
// headers, the same scopes), and the old alias is
// IDEMPOTENCY_IDENTITY_HEADERS_ALIAS, so one variable never sets two keys
// that Validate refuses together.
// Viper applies it to the prefixed, upper-cased key.
var envReplacer = strings.NewReplacer(
	"IDEMPOTENCY"+keyDelim+"IDENTITY_HEADERS", "IDEMPOTENCY_IDENTITY_HEADERS_ALIAS",
	keyDelim, "_",
)

// Load reads the YAML file at path and decodes it like [Parse].
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data)
}

// Parse decodes a YAML document over [Default], applies IDEMGATE_*
// environment overrides, and normalises the result (see the package
// documentation). It does not call [Config.Validate].
//
// Decoding errors are joined, one per problem, each a [*FieldError] naming
// its key and wrapping [ErrUnknownKey], [ErrDuration] or [ErrDecode]. A YAML
// syntax error is returned as viper reports it.
func Parse(data []byte) (*Config, error) {
	v := viper.NewWithOptions(
		viper.KeyDelimiter(keyDelim),
		viper.EnvKeyReplacer(envReplacer),
		// Without it, an environment variable for a key absent from the file
		// never reaches Unmarshal (ecosystem.md §3.1).
		viper.ExperimentalBindStruct(),
	)
	v.SetConfigType("yaml")
	v.SetEnvPrefix(EnvPrefix)
	v.AllowEmptyEnv(true)
	v.AutomaticEnv()
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c := Default()
	if err := v.UnmarshalExact(c, viper.DecodeHook(decodeHook)); err != nil {
		return nil, decodeErrors(err)
	}
	hostKeys, err := rawTenantHostKeys(data)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c.normalize(hostKeys)
	return c, nil
}

// rawTenantHostKeys returns the idempotency.tenant_hosts keys exactly as the
// YAML document writes them, or nil when it has none. Viper lower-cases map
// keys and silently merges "Shop.example" into "shop.example"; these keys let
// [Config.Validate] refuse such duplicates instead.
func rawTenantHostKeys(data []byte) ([]string, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	id := mappingValue(doc.Content[0], "idempotency")
	if id == nil {
		return nil, nil
	}
	hosts := mappingValue(id, "tenant_hosts")
	if hosts == nil || hosts.Kind != yaml.MappingNode {
		return nil, nil
	}
	keys := make([]string, 0, len(hosts.Content)/2)
	for i := 0; i+1 < len(hosts.Content); i += 2 {
		keys = append(keys, hosts.Content[i].Value)
	}
	return keys, nil
}

// mappingValue returns the value of key in the mapping node n, with keys
// compared case-insensitively as viper does, or nil.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if strings.EqualFold(n.Content[i].Value, key) {
			return n.Content[i+1]
		}
	}
	return nil
}

// decodeHook replaces viper's default hooks: durations must be strings with a
// unit, a string decodes into a list by splitting at commas (for environment
// variables), and a string decodes into a Session as its path parameter.
var decodeHook = mapstructure.ComposeDecodeHookFunc(
	sessionHook,
	durationHook,
	listHook,
)

var (
	durationType = reflect.TypeFor[time.Duration]()
	sessionType  = reflect.TypeFor[Session]()
)

// durationHook decodes a time.Duration from a string with a unit and refuses
// anything else: weakly typed decoding would read a bare 5 as 5ns.
func durationHook(_, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	switch d := data.(type) {
	case time.Duration:
		return d, nil
	case string:
		v, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return nil, fmt.Errorf("%w %q: write a number with a unit, like \"30s\" or \"500ms\"", ErrDuration, d)
		}
		return v, nil
	default:
		return nil, fmt.Errorf("%w %v: a bare number is not a duration; write it with a unit, like \"%vs\"", ErrDuration, d, d)
	}
}

// listHook splits a string at commas into a list, trimming spaces around
// items; "" is the empty list.
func listHook(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String || to.Kind() != reflect.Slice {
		return data, nil
	}
	s := strings.TrimSpace(data.(string))
	if s == "" {
		return []string{}, nil
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts, nil
}

// sessionHook decodes the short form "session: id" as {param: id}; the map
// form decodes as a struct, with unknown keys refused.
func sessionHook(from, to reflect.Type, data any) (any, error) {
	if to != sessionType || from.Kind() != reflect.String {
		return data, nil
	}
	return map[string]any{"param": data}, nil
}

// configTypeName is how mapstructure names the root when it has no key.
var configTypeName = reflect.TypeFor[Config]().String()

// decodeErrors turns mapstructure's error tree into one [*FieldError] per
// problem, sorted by key.
func decodeErrors(err error) error {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var de *mapstructure.DecodeError
		if !errors.As(e, &de) {
			out = append(out, &FieldError{Msg: e.Error(), Err: ErrDecode})
			return
		}
		if de != e {
			// A wrapper such as "decoding failed due to ...": unwrap one
			// level, as errors.As found only the first DecodeError.
			if u := errors.Unwrap(e); u != nil {
				walk(u)
			} else {
				walk(de)
			}
			return
		}
		inner := de.Unwrap()
		var nested *mapstructure.DecodeError
		if errors.As(inner, &nested) {
			walk(inner)
			return
		}
		key := de.Name()
		if key == configTypeName {
			key = ""
		}
		msg := inner.Error()
		switch {
		case strings.HasPrefix(msg, "has invalid keys: "):
			for k := range strings.SplitSeq(strings.TrimPrefix(msg, "has invalid keys: "), ", ") {
				out = append(out, &FieldError{Key: joinKey(key, k), Msg: "unknown key", Err: ErrUnknownKey})
			}
		case errors.Is(inner, ErrDuration):
			out = append(out, &FieldError{Key: key, Msg: msg, Err: ErrDuration})
		default:
			out = append(out, &FieldError{Key: key, Msg: msg, Err: ErrDecode})
		}
	}
	walk(err)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	errs := make([]error, len(out))
	for i, e := range out {
		errs[i] = e
	}
	return errors.Join(errs...)
}

func joinKey(parent, child string) string {
	if parent == "" {
		return child
	}
	return parent + "." + child
}

// normalize canonicalises what is case-insensitive and fills in defaults that
// depend on other fields. hostKeys are the tenant_hosts keys as the file
// wrote them (see rawTenantHostKeys), or nil.
func (c *Config) normalize(hostKeys []string) {
	id := &c.Idempotency
	id.Header = textproto.CanonicalMIMEHeaderKey(id.Header)
	if id.ReplayHeader != "" {
		id.ReplayHeader = textproto.CanonicalMIMEHeaderKey(id.ReplayHeader)
	}
	canonicalAll(id.IdentityHeaders)
	canonicalAll(id.Identity.Headers)
	if id.Identity.JWT.Header != "" {
		id.Identity.JWT.Header = textproto.CanonicalMIMEHeaderKey(id.Identity.JWT.Header)
	}
	canonicalAll(id.DropHeaders)
	id.TenantHosts = normalizeHostKeys(id.TenantHosts, hostKeys)
	for i := range c.Routes {
		r := &c.Routes[i]
		if r.Session != nil && r.Session.Header != "" {
			r.Session.Header = textproto.CanonicalMIMEHeaderKey(r.Session.Header)
		}
		if rl := r.RateLimit; rl != nil {
			if rl.Algorithm == "" {
				rl.Algorithm = AlgorithmTokenBucket
			}
			if rl.Algorithm == AlgorithmWindow && rl.Block == 0 {
				rl.Block = rl.Per
			}
			if name, ok := strings.CutPrefix(rl.By, "header:"); ok && name != "" {
				rl.By = "header:" + textproto.CanonicalMIMEHeaderKey(name)
			}
		}
	}
}

// normalizeHostKeys returns tenant_hosts with each key in [NormalizeHost]'s
// form, so that lookups find it. Keys are taken as the file wrote them
// (raw), when known, with their values from hosts (whose keys viper
// lower-cased). Keys that Validate must refuse are kept as written: one
// with a port (a tenant per port cannot be expressed), and every key of a
// group that normalizes to one host.
func normalizeHostKeys(hosts map[string]string, raw []string) map[string]string {
	if len(hosts) == 0 {
		return hosts
	}
	if raw == nil {
		raw = slices.Collect(maps.Keys(hosts))
	}
	groups := make(map[string][]string, len(raw))
	for _, k := range raw {
		n := NormalizeHost(k)
		groups[n] = append(groups[n], k)
	}
	out := make(map[string]string, len(raw))
	for _, k := range raw {
		t, ok := hosts[k]
		if !ok {
			t = hosts[strings.ToLower(k)]
		}
		n := NormalizeHost(k)
		if len(groups[n]) > 1 || hasPort(k) {
			out[k] = t
		} else {
			out[n] = t
		}
	}
	return out
}

// hasPort reports whether the host h ends in a port.
func hasPort(h string) bool {
	if strings.HasPrefix(h, "[") {
		i := strings.IndexByte(h, ']')
		return i >= 0 && strings.HasPrefix(h[i+1:], ":")
	}
	return strings.Count(h, ":") == 1
}

func canonicalAll(names []string) {
	for i, n := range names {
		names[i] = textproto.CanonicalMIMEHeaderKey(n)
	}
}
