package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"net/textproto"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/internal/errtree"
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
	// ErrSyntax means a document that is not YAML; see [*SyntaxError].
	ErrSyntax = errors.New("YAML syntax error")
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

// LoadChecked reads the YAML file at path and checks it like [Check] (and
// returns what Check returns). A file that cannot be read is one error naming the path, such as
// "nope.yaml: no such file or directory"; it wraps the [os.ReadFile] error.
func LoadChecked(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return nil, fmt.Errorf("%s: %w", path, pe.Err)
		}
		return nil, err
	}
	return Check(data)
}

// Check decodes data like [Parse] and validates it like [Config.Validate],
// reporting every problem of the document in one error: a YAML syntax error
// alone (a [*SyntaxError]: nothing after it can be read), otherwise the
// decoding problems (unknown keys, wrong types, durations without a unit)
// and the semantic ones together, one [*FieldError] each. A semantic problem
// of a key that could not be decoded is left out: it would describe the
// default the key kept. Check returns the valid Config and nil, or the error
// and the Config as far as it could be decoded (nil after a syntax error):
// that one is not valid, and is only for reports such as [UnknownEnv].
func Check(data []byte) (*Config, error) {
	c, decodeErr, err := parse(data)
	if err != nil {
		return nil, err
	}
	validErr := c.Validate()
	if decodeErr == nil && validErr == nil {
		return c, nil
	}
	var errs []error
	failed := map[string]bool{}       // keys that could not be decoded
	failedParent := map[string]bool{} // the sections holding them
	if decodeErr != nil {
		for _, e := range decodeErr.(interface{ Unwrap() []error }).Unwrap() {
			errs = append(errs, e)
			var fe *FieldError
			if errors.As(e, &fe) && fe.Key != "" && !errors.Is(fe, ErrUnknownKey) {
				failed[fe.Key] = true
				failedParent[parentKey(fe.Key)] = true
			}
		}
	}
	if validErr != nil {
		for _, e := range validErr.(interface{ Unwrap() []error }).Unwrap() {
			// A conflict in a section with an undecodable key may be
			// with that key's default: it would mislead.
			var fe *FieldError
			if errors.As(e, &fe) && (failed[fe.Key] || errors.Is(fe, ErrConflict) && failedParent[parentKey(fe.Key)]) {
				continue
			}
			errs = append(errs, e)
		}
	}
	return c, errors.Join(errs...)
}

// parentKey is the section holding key: "routes[0]" for "routes[0].idempotent".
func parentKey(key string) string {
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[:i]
	}
	return ""
}

// SyntaxError is a YAML syntax error at a line of the document.
type SyntaxError struct {
	// Line is the 1-based line where the document stops being YAML: the
	// first line that, added to the lines before it, makes them unreadable.
	Line int
	// Msg is the YAML parser's description, with a hint where one helps.
	Msg string
	// Text is the line's content, without its line break.
	Text string
}

// Error returns "line N: Msg: "Text"".
func (e *SyntaxError) Error() string {
	if e.Line == 0 {
		return e.Msg
	}
	return fmt.Sprintf("line %d: %s: %q", e.Line, e.Msg, e.Text)
}

// Unwrap returns [ErrSyntax].
func (e *SyntaxError) Unwrap() error { return ErrSyntax }

// maxLocateLines bounds the documents whose syntax errors are located line
// by line (one parse per line); longer ones keep the parser's own line.
const maxLocateLines = 5000

// yamlLine matches the parser's "yaml: line N: " prefix.
var yamlLine = regexp.MustCompile(`^yaml: (?:line \d+: )?`)

// syntaxError checks that data is YAML and returns the problems if not: one
// [*SyntaxError], or one error per duplicated key, with its line.
//
// The YAML parser (go.yaml.in/yaml/v3, which viper uses) names the line
// where the enclosing block began, not the line of the problem, and counts
// it from 0 (an indentation mistake on line 6 inside a list that starts on
// line 4 is reported as "line 3"); only scanner errors get the right line.
// So the line is found here instead: the last line whose prefix of the
// document still parses is followed by the line that breaks it.
func syntaxError(data []byte) error {
	var n yaml.Node
	err := yaml.Unmarshal(data, &n)
	if err == nil {
		var m map[string]any
		err = yaml.Unmarshal(data, &m)
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil // a document that is not a map is for the decoder
		}
		errs := make([]error, len(te.Errors))
		for i, e := range te.Errors {
			errs[i] = &SyntaxError{Msg: e}
		}
		return errors.Join(errs...)
	}
	msg := yamlLine.ReplaceAllString(err.Error(), "")
	if h, ok := syntaxHints[msg]; ok {
		msg += " (" + h + ")"
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxLocateLines {
		return &SyntaxError{Msg: err.Error()}
	}
	for k := len(lines) - 1; k >= 0; k-- {
		if yaml.Unmarshal(bytes.Join(lines[:k], nil), &n) == nil {
			text := strings.TrimRight(string(lines[min(k, len(lines)-1)]), "\r\n")
			return &SyntaxError{Line: k + 1, Msg: msg, Text: text}
		}
	}
	return &SyntaxError{Msg: err.Error()}
}

// syntaxHints explains the parser errors that an indentation mistake causes.
var syntaxHints = map[string]string{
	"did not find expected '-' indicator":            "check the indentation: a list item's keys line up under its first key",
	"did not find expected key":                      "check the indentation: keys of one map line up",
	"mapping values are not allowed in this context": "check the indentation, or quote a value that contains \": \"",
	"found character that cannot start any token":    "indent with spaces, not tabs",
}

// Parse decodes a YAML document over [Default], applies IDEMGATE_*
// environment overrides, and normalises the result (see the package
// documentation). It does not call [Config.Validate].
//
// Decoding errors are joined, one per problem, each a [*FieldError] naming
// its key and wrapping [ErrUnknownKey], [ErrDuration] or [ErrDecode]. A YAML
// syntax error is a [*SyntaxError] naming its line.
func Parse(data []byte) (*Config, error) {
	c, decodeErr, err := parse(data)
	if err != nil {
		return nil, err
	}
	if decodeErr != nil {
		return nil, decodeErr
	}
	return c, nil
}

// parse is [Parse], keeping what could be decoded when some keys could not:
// it returns the Config (normalised, with defaults where decoding failed)
// and the decoding errors, or a syntax error alone.
func parse(data []byte) (c *Config, decodeErr, err error) {
	if err := syntaxError(data); err != nil {
		return nil, nil, err
	}
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
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	c = Default()
	// A profile's presets go under the file and the environment: a key
	// either sets replaces the profile's whole value.
	file, err := fileKeys(data)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	env := envSetKeys(os.Environ())
	c.applyProfile(v.GetString("profile"), func(key string) bool { return hasKey(file, key) || hasKey(env, key) })
	var viperErrs []*FieldError
	if err := v.UnmarshalExact(c, viper.DecodeHook(decodeHook)); err != nil {
		viperErrs = decodeErrors(err)
	}
	decodeErr = mergeDecodeErrors(checkDocument(&doc), viperErrs)
	hostKeys := rawTenantHostKeys(&doc)
	c.normalize(hostKeys)
	return c, decodeErr, nil
}

// rawTenantHostKeys returns the idempotency.tenant_hosts keys exactly as the
// YAML document writes them, or nil when it has none. Viper lower-cases map
// keys and silently merges "Shop.example" into "shop.example"; these keys let
// [Config.Validate] refuse such duplicates instead.
func rawTenantHostKeys(doc *yaml.Node) []string {
	if len(doc.Content) == 0 {
		return nil
	}
	id := mappingValue(doc.Content[0], "idempotency")
	if id == nil {
		return nil
	}
	hosts := mappingValue(id, "tenant_hosts")
	if hosts == nil || hosts.Kind != yaml.MappingNode {
		return nil
	}
	keys := make([]string, 0, len(hosts.Content)/2)
	for i := 0; i+1 < len(hosts.Content); i += 2 {
		keys = append(keys, hosts.Content[i].Value)
	}
	return keys
}

// mergeDecodeErrors joins the problems that [checkDocument] found in the
// document with those of the decoder, sorted by key. The document's come
// first and win: a decoder problem of a key the document's problems already
// name (or of a key under one) is dropped, so that a problem is reported
// once, in the document's spelling (viper lower-cases keys).
func mergeDecodeErrors(doc, decoded []*FieldError) error {
	out := slices.Clone(doc)
	for _, e := range decoded {
		covered := false
		for _, d := range doc {
			k, dk := strings.ToLower(e.Key), strings.ToLower(d.Key)
			if k == dk || strings.HasPrefix(k, dk+".") || strings.HasPrefix(k, dk+"[") {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	errs := make([]error, len(out))
	for i, e := range out {
		errs[i] = e
	}
	return errors.Join(errs...)
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
	strictHook,
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

// strictHook refuses what weakly typed decoding would read silently and
// wrongly: a fraction into a whole number (1.5 read as 1), and a boolean into
// a number or a string (true read as 1 or "1").
func strictHook(from, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if f, ok := data.(float64); ok && f != math.Trunc(f) {
			return nil, fmt.Errorf("%w: %v is not a whole number", ErrDecode, f)
		}
	case reflect.Float32, reflect.Float64, reflect.String:
	default:
		return data, nil
	}
	if b, ok := data.(bool); ok {
		if to.Kind() == reflect.String {
			return nil, fmt.Errorf("%w: %v is not a string (quote it: \"%v\")", ErrDecode, b, b)
		}
		return nil, fmt.Errorf("%w: %v is not a number", ErrDecode, b)
	}
	return data, nil
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
// problem.
func decodeErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	leaf := func(e error) {
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
		case errors.Is(inner, ErrDecode):
			out = append(out, &FieldError{Key: key, Msg: strings.TrimPrefix(msg, ErrDecode.Error()+": "), Err: ErrDecode})
		case strings.HasPrefix(msg, "expected a map or struct, got "):
			got := strings.Trim(strings.TrimPrefix(msg, "expected a map or struct, got "), `"`)
			if w, ok := kindWords[got]; ok {
				got = w
			}
			out = append(out, &FieldError{Key: key, Msg: got + " is not a section of keys", Err: ErrDecode})
		default:
			if m, ok := typeMessage(inner); ok {
				msg = m
			}
			out = append(out, &FieldError{Key: key, Msg: msg, Err: ErrDecode})
		}
	}
	walk = func(err error) {
		for e := range errtree.Leaves(err) {
			leaf(e)
		}
	}
	walk(err)
	return out
}

// kindWords names reflect kinds for the operator.
var kindWords = map[string]string{
	"string": "a string", "slice": "a list", "bool": "a boolean",
	"int": "a number", "int64": "a number", "uint64": "a number", "float64": "a number",
}

// typeMessage words a value of the wrong type for the operator, like
// "\"yes\" is not a boolean (true or false)".
func typeMessage(err error) (string, bool) {
	var want reflect.Type
	var value any
	var pe *mapstructure.ParseError
	var ue *mapstructure.UnconvertibleTypeError
	switch {
	case errors.As(err, &pe):
		want, value = pe.Expected.Type(), pe.Value
	case errors.As(err, &ue):
		want, value = ue.Expected.Type(), ue.Value
	default:
		return "", false
	}
	for want.Kind() == reflect.Pointer {
		want = want.Elem()
	}
	var kind string
	switch want.Kind() {
	case reflect.Bool:
		kind = "a boolean (true or false)"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		kind = "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		kind = "a whole number >= 0"
	case reflect.Float32, reflect.Float64:
		kind = "a number"
	case reflect.String:
		kind = "a string"
	case reflect.Slice, reflect.Array:
		kind = "a list"
	case reflect.Map:
		kind = "a map of names to values"
	case reflect.Struct:
		kind = "a section of keys"
	default:
		kind = "a " + want.String()
	}
	var got string
	switch v := value.(type) {
	case nil:
		got = "null"
	case string:
		got = strconv.Quote(v)
	case []any:
		got = "a list"
	case map[string]any, map[any]any:
		got = "a map"
	default:
		got = fmt.Sprint(v)
	}
	return got + " is not " + kind, true
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
	// An empty list of issuers or audiences is the default (any): read
	// back from `idemgate config`, which prints it as [], it must not
	// count as a configured JWT source.
	if len(id.Identity.JWT.Issuers) == 0 {
		id.Identity.JWT.Issuers = nil
	}
	if len(id.Identity.JWT.Audiences) == 0 {
		id.Identity.JWT.Audiences = nil
	}
	if id.Identity.JWT.Header != "" {
		id.Identity.JWT.Header = textproto.CanonicalMIMEHeaderKey(id.Identity.JWT.Header)
	}
	canonicalAll(id.DropHeaders)
	id.TenantHosts = normalizeHostKeys(id.TenantHosts, hostKeys)
	for i := range c.Routes {
		r := &c.Routes[i]
		canonicalAll(r.DropHeaders)
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
