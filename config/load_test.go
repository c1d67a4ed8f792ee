package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// Tests that set environment variables cannot run in parallel (t.Setenv
// forbids it); they run before every parallel test, and t.Setenv restores
// the environment when each ends.

func TestLoadFull(t *testing.T) {
	t.Parallel()
	c, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatalf("Load = %v; want nil", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate = %v; want nil", err)
	}
	tests := []struct {
		key       string
		got, want any
	}{
		{"listen", c.Listen, "127.0.0.1:8443"},
		{"upstream.host", c.Upstream.Host, HostUpstream},
		{"tls.key_file", c.TLS.KeyFile, "/etc/idemgate/tls/tls.key"},
		{"tls.http_listen", c.TLS.HTTPListen, "127.0.0.1:8081"},
		{"store.redis.addrs", c.Store.Redis.Addrs, []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"}},
		{"store.redis.timeout", c.Store.Redis.Timeout, 250 * time.Millisecond},
		{"edge_limit.rate", c.EdgeLimit.Rate, 50.5},
		{"idempotency.header", c.Idempotency.Header, "X-Idempotency-Key"},
		{"idempotency.identity_headers", c.Idempotency.IdentityHeaders, []string{"Ucp-Agent", "Authorization"}},
		{"idempotency.replay_header", c.Idempotency.ReplayHeader, "X-Replayed"},
		{"idempotency.drop_headers", c.Idempotency.DropHeaders, []string{"Set-Cookie"}},
		{"idempotency.release_statuses", c.Idempotency.ReleaseStatuses, []int{408, 425, 429, 503}},
		{"idempotency.tenant_hosts", c.Idempotency.TenantHosts, map[string]string{
			"shop-a.example.com": "tenant-a", "shop-b.example.com": "tenant-b", "192.0.2.10": "tenant-c",
		}},
		{"routes[0].fingerprint_ignore", c.Routes[0].FingerprintIgnore, []string{"/meta/sent_at", "/a~1b"}},
		{"routes[0].rate_limit", *c.Routes[0].RateLimit, RateLimit{Requests: 600, Per: time.Minute, Algorithm: AlgorithmTokenBucket}},
		{"routes[1].session", *c.Routes[1].Session, Session{Param: "id"}},
		{"routes[1].rate_limit", *c.Routes[1].RateLimit, RateLimit{Requests: 10, Per: time.Second, Algorithm: AlgorithmWindow, Block: 30 * time.Second}},
		{"routes[2].session", *c.Routes[2].Session, Session{Header: "X-Cart-Id"}},
		{"routes[3].protocol", c.Routes[3].Protocol, ProtocolGraphQL},
		{"routes[4].session", *c.Routes[4].Session, Session{Param: "id"}},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel()
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("%s = %#v; want %#v", tt.key, tt.got, tt.want)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v; want os.ErrNotExist", err)
	}
}

func TestParseSyntaxError(t *testing.T) {
	t.Parallel()
	if _, err := Parse([]byte("listen: [\n")); err == nil {
		t.Errorf("Parse(bad YAML) = nil; want error")
	}
}

func TestParseEmpty(t *testing.T) {
	t.Parallel()
	c, err := Parse(nil)
	if err != nil {
		t.Fatalf("Parse(nil) = %v; want nil", err)
	}
	if want := Default(); !reflect.DeepEqual(c, want) {
		t.Errorf("Parse(nil) = %+v; want Default() %+v", c, want)
	}
}

// envKeys lists every scalar or list key of Config (not routes, not maps) as
// its environment variable, with the field's type.
func envKeys(t *testing.T) map[string]reflect.Type {
	t.Helper()
	keys := map[string]reflect.Type{}
	var walk func(reflect.Type, string)
	walk = func(typ reflect.Type, prefix string) {
		for f := range typ.Fields() {
			tag := f.Tag.Get("mapstructure")
			if tag == "" || tag == "routes" {
				continue
			}
			name := prefix + "_" + strings.ToUpper(tag)
			if tag == "identity_headers" {
				name += "_ALIAS" // see envReplacer
			}
			switch {
			case f.Type.Kind() == reflect.Struct:
				walk(f.Type, name)
			case f.Type.Kind() == reflect.Map:
				// tenant_hosts: a map cannot come from one variable.
			default:
				if _, dup := keys[name]; dup {
					t.Fatalf("two keys map to %s", name)
				}
				keys[name] = f.Type
			}
		}
	}
	walk(reflect.TypeFor[Config](), EnvPrefix)
	return keys
}

// TestEnvOverridesEveryKey sets an IDEMGATE_* variable for every scalar and
// list key, with none of them in the file, and expects each to arrive.
func TestEnvOverridesEveryKey(t *testing.T) {
	keys := envKeys(t)
	if len(keys) < 45 {
		t.Fatalf("found %d keys; want every key of DESIGN.md", len(keys))
	}
	values := map[reflect.Type]struct {
		env  string
		want any
	}{
		reflect.TypeFor[string]():        {"from-env", "from-env"},
		reflect.TypeFor[int]():           {"7", 7},
		reflect.TypeFor[int64]():         {"7", int64(7)},
		reflect.TypeFor[float64]():       {"7.5", 7.5},
		reflect.TypeFor[bool]():          {"true", true},
		reflect.TypeFor[time.Duration](): {"7s", 7 * time.Second},
		reflect.TypeFor[[]string]():      {"a, b", []string{"a", "b"}},
		reflect.TypeFor[[]int]():         {"7,8", []int{7, 8}},
	}
	for name, typ := range keys {
		v, ok := values[typ]
		if !ok {
			t.Fatalf("%s: no test value for type %v", name, typ)
		}
		t.Setenv(name, v.env)
	}
	c, err := Parse([]byte("upstream:\n  host: preserve\n"))
	if err != nil {
		t.Fatalf("Parse = %v; want nil", err)
	}
	got := map[string]any{}
	var walk func(reflect.Value, string)
	walk = func(rv reflect.Value, prefix string) {
		for i := range rv.NumField() {
			f := rv.Type().Field(i)
			name := prefix + "_" + strings.ToUpper(f.Tag.Get("mapstructure"))
			if f.Tag.Get("mapstructure") == "identity_headers" {
				name += "_ALIAS"
			}
			if _, ok := keys[name]; ok {
				got[name] = rv.Field(i).Interface()
			} else if f.Type.Kind() == reflect.Struct {
				walk(rv.Field(i), name)
			}
		}
	}
	walk(reflect.ValueOf(c).Elem(), EnvPrefix)
	for name, typ := range keys {
		want := values[typ].want
		// Parse canonicalises header names.
		switch name {
		case "IDEMGATE_IDEMPOTENCY_HEADER", "IDEMGATE_IDEMPOTENCY_REPLAY_HEADER", "IDEMGATE_IDEMPOTENCY_IDENTITY_JWT_HEADER":
			want = "From-Env"
		case "IDEMGATE_IDEMPOTENCY_IDENTITY_HEADERS_ALIAS", "IDEMGATE_IDEMPOTENCY_IDENTITY_HEADERS", "IDEMGATE_IDEMPOTENCY_DROP_HEADERS":
			want = []string{"A", "B"}
		}
		if !reflect.DeepEqual(got[name], want) {
			t.Errorf("%s: got %#v; want %#v", name, got[name], want)
		}
	}
}

func TestEnvOverrides(t *testing.T) {
	tests := []struct {
		name, yaml string
		env        map[string]string
		check      func(*Config) (got, want any)
	}{
		{
			name: "password absent from file",
			env:  map[string]string{"IDEMGATE_STORE_REDIS_PASSWORD": "s3cret"},
			check: func(c *Config) (any, any) {
				return c.Store.Redis.Password, "s3cret"
			},
		},
		{
			name: "sentinel password absent from file",
			env:  map[string]string{"IDEMGATE_STORE_REDIS_SENTINEL_PASSWORD": "s3ntinel"},
			check: func(c *Config) (any, any) {
				return c.Store.Redis.SentinelPassword, "s3ntinel"
			},
		},
		{
			name: "env wins over file",
			yaml: "upstream:\n  url: http://file:1\n",
			env:  map[string]string{"IDEMGATE_UPSTREAM_URL": "http://env:2"},
			check: func(c *Config) (any, any) {
				return c.Upstream.URL, "http://env:2"
			},
		},
		{
			name: "tenant",
			env:  map[string]string{"IDEMGATE_IDEMPOTENCY_TENANT": "shop-42"},
			check: func(c *Config) (any, any) {
				return c.Idempotency.Tenant, "shop-42"
			},
		},
		{
			name: "listen",
			yaml: "listen: \":1\"\n",
			env:  map[string]string{"IDEMGATE_LISTEN": ":8081"},
			check: func(c *Config) (any, any) {
				return c.Listen, ":8081"
			},
		},
		{
			name: "empty value wins",
			env:  map[string]string{"IDEMGATE_IDEMPOTENCY_REPLAY_HEADER": ""},
			check: func(c *Config) (any, any) {
				return c.Idempotency.ReplayHeader, ""
			},
		},
		{
			name: "empty list",
			env:  map[string]string{"IDEMGATE_IDEMPOTENCY_IDENTITY_HEADERS": ""},
			check: func(c *Config) (any, any) {
				return c.Idempotency.Identity.Headers, []string{}
			},
		},
		{
			name: "nested key beside a file section",
			yaml: "store:\n  redis:\n    db: 3\n",
			env:  map[string]string{"IDEMGATE_STORE_REDIS_KEY_PREFIX": "x:"},
			check: func(c *Config) (any, any) {
				return [2]any{c.Store.Redis.DB, c.Store.Redis.KeyPrefix}, [2]any{3, "x:"}
			},
		},
		{
			name: "tenant_hosts kept with env present",
			yaml: "idempotency:\n  tenant_hosts:\n    a.example.com: a\n",
			env:  map[string]string{"IDEMGATE_IDEMPOTENCY_TENANT": "t"},
			check: func(c *Config) (any, any) {
				return c.Idempotency.TenantHosts, map[string]string{"a.example.com": "a"}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatalf("Parse = %v; want nil", err)
			}
			if got, want := tt.check(c); !reflect.DeepEqual(got, want) {
				t.Errorf("got %#v; want %#v", got, want)
			}
		})
	}
}

func TestEnvBareDuration(t *testing.T) {
	t.Setenv("IDEMGATE_UPSTREAM_TIMEOUT", "5")
	_, err := Parse(nil)
	if !errors.Is(err, ErrDuration) || !strings.Contains(err.Error(), "upstream.timeout") {
		t.Errorf("Parse with IDEMGATE_UPSTREAM_TIMEOUT=5 = %v; want upstream.timeout ErrDuration", err)
	}
}

// errorLines returns err's lines, failing when err is nil.
func errorLines(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		t.Fatal("got nil error; want an error")
	}
	return strings.Split(err.Error(), "\n")
}

func hasLinePrefix(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

func TestUnknownKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		keys       []string
	}{
		{"top", "foo: 1\n", []string{"foo"}},
		{"top two", "foo: 1\nbar: 2\n", []string{"bar", "foo"}},
		{"nested", "store:\n  redis:\n    passwrd: x\n", []string{"store.redis.passwrd"}},
		{"section", "idempotency:\n  retension: 1h\n", []string{"idempotency.retension"}},
		{"in route", "routes:\n  - name: a\n    retires: 3\n", []string{"routes[0].retires"}},
		{"second route", "routes:\n  - name: a\n  - name: b\n    idempotnt: true\n", []string{"routes[1].idempotnt"}},
		{"rate_limit", "routes:\n  - name: a\n    rate_limit: {requests: 1, per: 1s, burst: 3}\n", []string{"routes[0].rate_limit.burst"}},
		{"session map", "routes:\n  - name: a\n    session: {heder: X-A}\n", []string{"routes[0].session.heder"}},
		{"on_demand", "tls:\n  on_demand:\n    allowed: [a]\n", []string{"tls.on_demand.allowed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.yaml))
			lines := errorLines(t, err)
			if !errors.Is(err, ErrUnknownKey) {
				t.Errorf("error %q does not wrap ErrUnknownKey", err)
			}
			if len(lines) != len(tt.keys) {
				t.Errorf("got %d lines %q; want %d", len(lines), lines, len(tt.keys))
			}
			for _, k := range tt.keys {
				if !hasLinePrefix(lines, k+": unknown key") {
					t.Errorf("got %q; want a line %q", lines, k+": unknown key")
				}
			}
		})
	}
}

func TestDurations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml, key string
	}{
		{"upstream.timeout int", "upstream:\n  timeout: 5\n", "upstream.timeout"},
		{"zero int", "sessions:\n  queue_timeout: 0\n", "sessions.queue_timeout"},
		{"float", "store:\n  redis:\n    timeout: 0.5\n", "store.redis.timeout"},
		{"string without unit", "idempotency:\n  lease: \"120\"\n", "idempotency.lease"},
		{"garbage", "idempotency:\n  retention: forever\n", "idempotency.retention"},
		{"route timeout", "routes:\n  - name: a\n    timeout: 5\n", "routes[0].timeout"},
		{"rate_limit per", "routes:\n  - name: a\n    rate_limit: {requests: 1, per: 60}\n", "routes[0].rate_limit.per"},
		{"rate_limit block", "routes:\n  - name: a\n    rate_limit: {requests: 1, per: 1s, algorithm: window, block: 60}\n", "routes[0].rate_limit.block"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.yaml))
			lines := errorLines(t, err)
			if !errors.Is(err, ErrDuration) {
				t.Errorf("error %q does not wrap ErrDuration", err)
			}
			if !hasLinePrefix(lines, tt.key+": ") {
				t.Errorf("got %q; want a line for %s", lines, tt.key)
			}
		})
	}
	c, err := Parse([]byte("upstream:\n  timeout: 1m30s\n"))
	if err != nil || c.Upstream.Timeout != 90*time.Second {
		t.Errorf("timeout 1m30s: got %v, %v; want 1m30s, nil", c.Upstream.Timeout, err)
	}
}

func TestDecodeTypeError(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("upstream:\n  url: [a]\nedge_limit:\n  burst: lots\n"))
	lines := errorLines(t, err)
	if !errors.Is(err, ErrDecode) {
		t.Errorf("error %q does not wrap ErrDecode", err)
	}
	for _, k := range []string{"edge_limit.burst: ", "upstream.url: "} {
		if !hasLinePrefix(lines, k) {
			t.Errorf("got %q; want a line for %s", lines, k)
		}
	}
}

func TestTenantHosts(t *testing.T) {
	t.Parallel()
	yaml := `
idempotency:
  tenant_hosts:
    shop.example.com: a
    API.Shop-B.example.co.uk: b
    trailing.example.org.: c
    "2001:db8::1": d
    "[2001:DB8::2]": e
`
	c, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("Parse = %v; want nil", err)
	}
	want := map[string]string{
		"shop.example.com":         "a",
		"api.shop-b.example.co.uk": "b",
		"trailing.example.org":     "c",
		"2001:db8::1":              "d",
		"2001:db8::2":              "e",
	}
	if !reflect.DeepEqual(c.Idempotency.TenantHosts, want) {
		t.Errorf("tenant_hosts = %v; want %v", c.Idempotency.TenantHosts, want)
	}
	c.Upstream.URL = "http://u:1"
	if err := c.Validate(); err != nil {
		t.Errorf("Validate = %v; want nil", err)
	}
	if got, ok := c.Idempotency.TenantFor("Api.Shop-B.Example.co.uk.:443"); got != "b" || !ok {
		t.Errorf("TenantFor = %q, %v; want %q, true", got, ok, "b")
	}
}

// TestTenantHostsRefused checks what Validate refuses in tenant_hosts as a
// file writes it, including keys that viper would merge.
func TestTenantHostsRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, hosts string
		keys        []string
		err         error
	}{
		{"case duplicate", "Shop-A.example: a\n    shop-a.example: b", []string{"Shop-A.example", "shop-a.example"}, ErrDuplicate},
		{"dot duplicate", "shop-a.example: a\n    shop-a.example.: b", []string{"shop-a.example", "shop-a.example."}, ErrDuplicate},
		{"same tenant duplicate", "shop-a.example: a\n    SHOP-A.EXAMPLE.: a", []string{"SHOP-A.EXAMPLE.", "shop-a.example"}, ErrDuplicate},
		{"ipv6 duplicate", "\"::1\": a\n    \"[0::1]\": b", []string{"::1", "[0::1]"}, ErrDuplicate},
		{"port", "shop-a.example:8443: a", []string{"shop-a.example:8443"}, ErrInvalid},
		{"two dots", "shop-a.example..: a", []string{"shop-a.example."}, ErrInvalid},
		{"non-ascii", "b\u00fccher.example: a", []string{"b\u00fccher.example"}, ErrInvalid},
		{"kelvin", "shop-\u212a.example: a", []string{"shop-\u212a.example"}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte("upstream:\n  url: http://u:1\nidempotency:\n  tenant_hosts:\n    " + tt.hosts + "\n"))
			if err != nil {
				t.Fatalf("Parse = %v", err)
			}
			err = c.Validate()
			if !errors.Is(err, tt.err) {
				t.Fatalf("Validate = %v; want %v", err, tt.err)
			}
			for _, k := range tt.keys {
				if !strings.Contains(err.Error(), fmt.Sprintf("%q", k)) {
					t.Errorf("Validate = %q; want it to name key %q", err, k)
				}
			}
		})
	}
}

func TestTenantWithTenantHostsRefused(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("upstream:\n  url: http://u:1\nidempotency:\n  tenant: fallback\n  tenant_hosts:\n    a.example: a\n"))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	if err := c.Validate(); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "idempotency.tenant") {
		t.Errorf("Validate = %v; want a conflict on idempotency.tenant", err)
	}
}

func TestPathCase(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		yaml, want string
		valid      bool
	}{
		{"", PathCaseInsensitive, true},
		{"path_case: insensitive\n", PathCaseInsensitive, true},
		{"path_case: sensitive\n", PathCaseSensitive, true},
		{"path_case: Sensitive\n", "Sensitive", false},
		{"path_case: \"\"\n", "", false},
		{"path_case: \"no\"\n", "no", false},
	} {
		c, err := Parse([]byte("upstream:\n  url: http://u:1\n" + tt.yaml))
		if err != nil {
			t.Fatalf("Parse(%q) = %v", tt.yaml, err)
		}
		if c.PathCase != tt.want {
			t.Errorf("Parse(%q).PathCase = %q; want %q", tt.yaml, c.PathCase, tt.want)
		}
		err = c.Validate()
		if tt.valid && err != nil || !tt.valid && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "path_case")) {
			t.Errorf("Parse(%q).Validate() = %v; want valid %v", tt.yaml, err, tt.valid)
		}
	}
}

func TestSessionForms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		want       *Session
	}{
		{"absent", "", nil},
		{"string", "session: id", &Session{Param: "id"}},
		{"param map", "session: {param: id}", &Session{Param: "id"}},
		{"header map", "session: {header: x-cart-id}", &Session{Header: "X-Cart-Id"}},
		{"block map", "session:\n      header: X-Cart-Id", &Session{Header: "X-Cart-Id"}},
		{"both", "session: {param: id, header: X-A}", &Session{Param: "id", Header: "X-A"}},
		{"empty map", "session: {}", &Session{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Parse([]byte("routes:\n  - name: a\n    " + tt.yaml + "\n"))
			if err != nil {
				t.Fatalf("Parse = %v; want nil", err)
			}
			if got := c.Routes[0].Session; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("session = %+v; want %+v", got, tt.want)
			}
		})
	}
	if _, err := Parse([]byte("routes:\n  - name: a\n    session: [id]\n")); err == nil {
		t.Errorf("session: [id] parsed; want an error")
	}
}

func TestParseFillsRateLimitDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
routes:
  - name: a
    rate_limit: {requests: 5, per: 10s}
  - name: b
    rate_limit: {requests: 5, per: 10s, algorithm: window}
`))
	if err != nil {
		t.Fatalf("Parse = %v; want nil", err)
	}
	if got, want := *c.Routes[0].RateLimit, (RateLimit{Requests: 5, Per: 10 * time.Second, Algorithm: AlgorithmTokenBucket}); got != want {
		t.Errorf("rate_limit a = %+v; want %+v", got, want)
	}
	if got, want := *c.Routes[1].RateLimit, (RateLimit{Requests: 5, Per: 10 * time.Second, Algorithm: AlgorithmWindow, Block: 10 * time.Second}); got != want {
		t.Errorf("rate_limit b = %+v; want %+v", got, want)
	}
}

func TestParseNullSectionsKeepDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("tls:\nstore:\n  redis:\nidempotency:\n  identity_headers:\nroutes:\n"))
	if err != nil {
		t.Fatalf("Parse = %v; want nil", err)
	}
	if want := Default(); !reflect.DeepEqual(c, want) {
		t.Errorf("Parse(null sections) = %+v; want Default() %+v", c, want)
	}
}

func TestParseReplacesLists(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("idempotency:\n  release_statuses: [503]\n  identity_headers: []\n"))
	if err != nil {
		t.Fatalf("Parse = %v; want nil", err)
	}
	if got := c.Idempotency.ReleaseStatuses; !reflect.DeepEqual(got, []int{503}) {
		t.Errorf("release_statuses = %v; want [503]", got)
	}
	if got := c.Idempotency.IdentityHeaders; len(got) != 0 {
		t.Errorf("identity_headers = %v; want []", got)
	}
}

func TestSyntaxErrorLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		line       int
		text       string // the line's content in the message
	}{
		// The parser itself says "line 3" here: the line where the list
		// began, counted from 0.
		{"list item key indented less", "upstream:\n  url: http://x\nroutes:\n  - name: a\n    method: POST\n   path: /a\n", 6, "   path: /a"},
		{"list item key at the list's indentation", "x: 1\nroutes:\n  - name: a\n    method: POST\n  path: /a\n", 5, "  path: /a"},
		{"key indented more", "a:\n  b: 1\n   c: 2\n", 3, "   c: 2"},
		{"unclosed flow list", "x: 1\nroutes:\n  - name: a\n    method: [POST\n    path: /a\n", 4, "    method: [POST"},
		{"unclosed quote", "a: \"x\nb: 1\nc: 2\n", 1, "a: \"x"},
		{"tab", "a: 1\n\tb: 1\n", 2, "\tb: 1"},
		{"after a multi-line string", "a: \"x\n  y\"\nb: 1\nc:\n  - 1\n  d: 2\n", 6, "  d: 2"},
		{"last line without newline", "a: 1\nb: [", 2, "b: ["},
		{"crlf", "a: 1\r\nb:\r\n  - 1\r\n c: 2\r\n", 4, " c: 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, f := range []func([]byte) (*Config, error){Parse, Check} {
				_, err := f([]byte(tt.yaml))
				var se *SyntaxError
				if !errors.As(err, &se) || !errors.Is(err, ErrSyntax) {
					t.Fatalf("error %v is not a *SyntaxError wrapping ErrSyntax", err)
				}
				if se.Line != tt.line || se.Text != tt.text {
					t.Errorf("line %d %q; want line %d %q (%v)", se.Line, se.Text, tt.line, tt.text, err)
				}
				if want := fmt.Sprintf("line %d: ", tt.line); !strings.HasPrefix(err.Error(), want) || strings.Count(err.Error(), "\n") != 0 {
					t.Errorf("message %q; want one line starting %q", err, want)
				}
			}
		})
	}
}

func TestSyntaxErrorDuplicateKey(t *testing.T) {
	t.Parallel()
	_, err := Check([]byte("a: 1\nupstream:\n  url: x\n  url: y\n"))
	if !errors.Is(err, ErrSyntax) || err.Error() != `line 4: mapping key "url" already defined at line 3` {
		t.Errorf("Check = %v; want the duplicate key on line 4", err)
	}
}

func TestTypeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yaml, line string }{
		{"bool from yes", "routes:\n  - name: a\n    idempotent: yes\n", `routes[0].idempotent: "yes" is not a boolean (true or false)`},
		{"bool from list", "limiter:\n  ietf_headers: [true]\n", `limiter.ietf_headers: a list is not a boolean (true or false)`},
		{"int from word", "edge_limit:\n  burst: lots\n", `edge_limit.burst: "lots" is not a whole number`},
		{"int from fraction", "store:\n  memory:\n    max_entries: 1.5\n", `store.memory.max_entries: 1.5 is not a whole number`},
		{"int from bool", "store:\n  memory:\n    max_entries: true\n", `store.memory.max_entries: true is not a whole number`},
		{"float from bool", "edge_limit:\n  rate: false\n", `edge_limit.rate: false is not a number`},
		{"string from bool", "idempotency:\n  replay_header: true\n", `idempotency.replay_header: true is not a string (quote it: "true")`},
		{"float from map", "edge_limit:\n  rate: {a: 1}\n", `edge_limit.rate: a map is not a number`},
		{"string from list", "upstream:\n  url: [a]\n", `upstream.url: a list is not a string`},
		{"string from map", "listen: {a: 1}\n", `listen: a map is not a string`},
		// Weakly typed decoding would read a map where a list belongs as a
		// list of one map, and a scalar as a list of one.
		{"list from map", "tls:\n  domains: {a: 1}\n", `tls.domains: a map is not a list`},
		{"list from scalar", "tls:\n  domains: a.example\n", `tls.domains: "a.example" is not a list (write ["a.example"])`},
		{"int list from scalar", "idempotency:\n  release_statuses: 503\n", `idempotency.release_statuses: 503 is not a list (write [503])`},
		{"int list item", "idempotency:\n  release_statuses: [503, often]\n", `idempotency.release_statuses[1]: "often" is not a whole number`},
		{"section from string", "store: redis\n", `store: "redis" is not a section of keys`},
		{"section from list", "store: [redis]\n", `store: a list is not a section of keys`},
		{"map from list", "idempotency:\n  tenant_hosts: [a]\n", `idempotency.tenant_hosts: a list is not a map of names to values`},
		// Weakly typed decoding would read a number as its digits.
		{"string from int", "idempotency:\n  replay_header: 5\n", `idempotency.replay_header: 5 is not a string (quote it: "5")`},
		{"string from float", "upstream:\n  url: 1.5\n", `upstream.url: 1.5 is not a string (quote it: "1.5")`},
		{"route string from int", "routes:\n  - name: 7\n", `routes[0].name: 7 is not a string (quote it: "7")`},
		{"string list item from int", "idempotency:\n  drop_headers: [Set-Cookie, 5]\n", `idempotency.drop_headers[1]: 5 is not a string (quote it: "5")`},
		{"map value from int", "idempotency:\n  tenant_hosts: {a.example: 5}\n", `idempotency.tenant_hosts.a.example: 5 is not a string (quote it: "5")`},
		{"number from string", "edge_limit:\n  burst: \"200\"\n", `edge_limit.burst: "200" is not a whole number`},
		{"bool from string", "limiter:\n  ietf_headers: \"true\"\n", `limiter.ietf_headers: "true" is not a boolean (true or false)`},
		{"duration from list", "upstream:\n  timeout: [5s]\n", `upstream.timeout: a list is not a duration (write a number with a unit, like "30s")`},
		{"session from int", "routes:\n  - session: 5\n", `routes[0].session: 5 is not a path parameter's name or a section of keys (quote it)`},
		{"routes as a map", "routes:\n  create_order: {method: POST, path: /o}\n", `routes: a map is not a list: write each entry as a list item, starting with "- " (- name: create_order)`},
		{"routes as a string", "routes: create_order\n", `routes: "create_order" is not a list: write each entry as a list item, starting with "- " (- name: create_order)`},
		{"through an alias", "x: &n 5\nidempotency:\n  replay_header: *n\n", `idempotency.replay_header: 5 is not a string (quote it: "5")`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.yaml))
			if !errors.Is(err, ErrDecode) {
				t.Errorf("error %v does not wrap ErrDecode", err)
			}
			if lines := errorLines(t, err); !slices.Contains(lines, tt.line) {
				t.Errorf("got %q; want the line %q", lines, tt.line)
			}
		})
	}
}

// TestCheckReportsEverything: a typo does not hide the semantic problems,
// and a type error does not add one about the default it left behind.
func TestCheckReportsEverything(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		want       []string // every line, in order
	}{
		{"four semantic errors and a typo", `
upstream:
  url: 127.0.0.1:3000
idempotency:
  retension: 48h
  lease: 2h
routes:
  - name: pay
    method: GET
    path: /pay
    idempotent: true
    timeout: 3h
`, []string{
			"idempotency.retension: unknown key; did you mean retention?",
			`upstream.url: "127.0.0.1:3000": want an absolute http or https URL`,
			"idempotency.max_lease: 1h (the default) is less than idempotency.lease (2h): renewals stop at max_lease",
			"routes[0].idempotent: is true on GET, a safe method; only writes are idempotent routes",
			"routes[0].timeout: 3h exceeds idempotency.max_lease (1h, the default): " + leaseOutlived,
		}},
		{"type error hides the conflict it causes", `
upstream:
  url: http://127.0.0.1:3000
routes:
  - name: pay
    method: POST
    path: /pay
    idempotent: yes
    require_key: true
`, []string{`routes[0].idempotent: "yes" is not a boolean (true or false)`}},
		{"a bad duration and a semantic error", `
upstream:
  url: http://127.0.0.1:3000
  timeout: 90
idempotency:
  retention: 30m
`, []string{
			`upstream.timeout: invalid duration 90: a bare number is not a duration; write it with a unit, like "90s"`,
			"idempotency.retention: 30m must exceed idempotency.max_lease (1h, the default): a record must outlive its longest lease",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := Check([]byte(tt.yaml))
			if c == nil || c.Upstream.URL == "" {
				t.Errorf("Check returned %+v; want what it decoded", c)
			}
			if got := errorLines(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
	c, err := Check([]byte("upstream:\n  url: http://127.0.0.1:3000\n"))
	if err != nil || c == nil || c.Upstream.URL != "http://127.0.0.1:3000" {
		t.Errorf("Check(valid) = %v, %v; want the config", c, err)
	}
}

func TestLoadCheckedMissingFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "nope.yaml")
	_, err := LoadChecked(path)
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadChecked(missing) = %v; want os.ErrNotExist", err)
	}
	if want := path + ": no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("LoadChecked(missing) = %q; want %q", err, want)
	}
	c, err := LoadChecked("testdata/full.yaml")
	if err != nil || c == nil {
		t.Errorf("LoadChecked(full.yaml) = %v; want nil", err)
	}
}

// TestKeySpelling: keys are case-sensitive (viper folds case; the chart's
// schema does not), and an unknown key names the key it most likely
// misspells, by the rule of the environment's did-you-mean.
func TestKeySpelling(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yaml, line string }{
		{"top-level upper case", "Routes: []\n", "Routes: unknown key; keys are case-sensitive: did you mean routes?"},
		{"top-level shouting", "ADMIN_LISTEN: \":9091\"\n", "ADMIN_LISTEN: unknown key; keys are case-sensitive: did you mean admin_listen?"},
		{"nested case", "store:\n  Backend: redis\n", "store.Backend: unknown key; keys are case-sensitive: did you mean backend?"},
		{"route key case", "routes:\n  - name: a\n    Method: POST\n", "routes[0].Method: unknown key; keys are case-sensitive: did you mean method?"},
		{"typo", "idempotency:\n  retension: 48h\n", "idempotency.retension: unknown key; did you mean retention?"},
		{"route typo", "routes:\n  - name: a\n    idempotnet: true\n", "routes[0].idempotnet: unknown key; did you mean idempotent?"},
		{"typo and case", "upstream:\n  URl: http://x\n", "upstream.URl: unknown key; keys are case-sensitive: did you mean url?"},
		{"nothing near", "upstream:\n  zzzzzzzz: 1\n", "upstream.zzzzzzzz: unknown key"},
		{"in a merged section", "base: &b {retension: 1h}\nidempotency:\n  <<: *b\n", "idempotency.retension: unknown key; did you mean retention?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tt.yaml))
			if !errors.Is(err, ErrUnknownKey) {
				t.Errorf("error %v does not wrap ErrUnknownKey", err)
			}
			lines := errorLines(t, err)
			if !slices.Contains(lines, tt.line) {
				t.Errorf("got %q; want the line %q", lines, tt.line)
			}
			// Reported once, in the file's spelling.
			n := 0
			for _, l := range lines {
				if strings.EqualFold(strings.SplitN(l, ":", 2)[0], strings.SplitN(tt.line, ":", 2)[0]) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("got %q; want the key reported once", lines)
			}
		})
	}
}
