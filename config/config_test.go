package config

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/pathtmpl"
)

// TestDefaultMatchesDesign decodes testdata/design.yaml, a verbatim copy of
// DESIGN.md's config block, and expects exactly Default plus the block's
// upstream.url and routes.
func TestDefaultMatchesDesign(t *testing.T) {
	t.Parallel()
	got, err := Load("testdata/design.yaml")
	if err != nil {
		t.Fatalf("Load = %v; want nil", err)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("Validate = %v; want nil", err)
	}
	want := Default()
	want.Upstream.URL = "http://127.0.0.1:3000"
	// DESIGN's sample is a UCP deployment: its identity is the UCP-Agent
	// header that UCP platforms send.
	want.Idempotency.Identity.Headers = []string{"Ucp-Agent"}
	want.Routes = []Route{
		{
			Name: "create_cart", Method: "POST", Path: "/ucp/v1/carts", Idempotent: true,
			RateLimit: &RateLimit{Requests: 600, Per: 60 * time.Second, Algorithm: AlgorithmTokenBucket},
		},
		{
			Name: "update_checkout", Method: "PUT", Path: "/ucp/v1/checkout-sessions/{id}", Idempotent: true,
			Session: &Session{Param: "id"},
		},
		{
			Name: "get_checkout", Method: "GET", Path: "/ucp/v1/checkout-sessions/{id}",
			Session: &Session{Param: "id"},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load(design.yaml) =\n%+v\nwant\n%+v", got, want)
	}
}

func TestDefaultValues(t *testing.T) {
	t.Parallel()
	c := Default()
	tests := []struct {
		key       string
		got, want any
	}{
		{"listen", c.Listen, ":8080"},
		{"admin_listen", c.AdminListen, ":9090"},
		{"max_buffered_bytes", c.MaxBufferedBytes, int64(268435456)},
		{"max_buffered_bytes_per_client", c.MaxBufferedBytesPerClient, int64(0)},
		{"max_header_bytes", c.MaxHeaderBytes, 65536},
		{"max_connections", c.MaxConnections, 10000},
		{"request_body_timeout", c.RequestBodyTimeout, 30 * time.Second},
		{"upstream.url", c.Upstream.URL, ""},
		{"upstream.timeout", c.Upstream.Timeout, 60 * time.Second},
		{"upstream.host", c.Upstream.Host, "preserve"},
		{"tls.mode", c.TLS.Mode, "none"},
		{"store.backend", c.Store.Backend, "memory"},
		{"store.memory.max_entries", c.Store.Memory.MaxEntries, 1000000},
		{"store.memory.max_bytes", c.Store.Memory.MaxBytes, int64(1073741824)},
		{"store.redis.addrs", c.Store.Redis.Addrs, []string{"127.0.0.1:6379"}},
		{"store.redis.master_name", c.Store.Redis.MasterName, ""},
		{"store.redis.db", c.Store.Redis.DB, 0},
		{"store.redis.key_prefix", c.Store.Redis.KeyPrefix, "idemgate:"},
		{"store.redis.timeout", c.Store.Redis.Timeout, 500 * time.Millisecond},
		{"store.redis.auto_pipeline", c.Store.Redis.AutoPipeline, true},
		{"store.redis.record_format", c.Store.Redis.RecordFormat, "compact"},
		{"store.redis.replay_cache.max_entries", c.Store.Redis.ReplayCache.MaxEntries, 100000},
		{"store.redis.replay_cache.max_bytes", c.Store.Redis.ReplayCache.MaxBytes, int64(64 << 20)},
		{"store.compression", c.Store.Compression, "none"},
		{"client_ip.trusted_proxies", c.ClientIP.TrustedProxies, []string{}},
		{"edge_limit.rate", c.EdgeLimit.Rate, 100.0},
		{"edge_limit.burst", c.EdgeLimit.Burst, 200},
		{"limiter.backend", c.Limiter.Backend, "local"},
		{"limiter.max_clients", c.Limiter.MaxClients, 1000000},
		{"limiter.ietf_headers", c.Limiter.IETFHeaders, false},
		{"idempotency.header", c.Idempotency.Header, "Idempotency-Key"},
		{"idempotency.identity_headers", c.Idempotency.IdentityHeaders, []string(nil)},
		{"idempotency.identity", c.Idempotency.Identity, Identity{JWT: JWT{Claims: []string{"iss", "sub"}, Algorithms: []string{"RS256", "ES256", "EdDSA"}, Leeway: 30 * time.Second}}},
		{"identity sources", c.Idempotency.IdentitySources().Headers, []string{"Authorization"}},
		{"idempotency.require_identity", c.Idempotency.RequireIdentity, true},
		{"idempotency.tenant", c.Idempotency.Tenant, ""},
		{"idempotency.tenant_hosts", c.Idempotency.TenantHosts, map[string]string{}},
		{"idempotency.retention", c.Idempotency.Retention, 25 * time.Hour},
		{"idempotency.lease", c.Idempotency.Lease, 120 * time.Second},
		{"idempotency.max_lease", c.Idempotency.MaxLease, 60 * time.Minute},
		{"idempotency.max_body_bytes", c.Idempotency.MaxBodyBytes, int64(1048576)},
		{"idempotency.max_response_bytes", c.Idempotency.MaxResponseBytes, int64(65536)},
		{"idempotency.replay_header", c.Idempotency.ReplayHeader, "Idempotent-Replayed"},
		{"idempotency.reuse_status", c.Idempotency.ReuseStatus, 409},
		{"idempotency.release_statuses", c.Idempotency.ReleaseStatuses, []int{307, 308, 400, 401, 403, 404, 405, 408, 409, 413, 415, 422, 425, 429, 503}},
		{"idempotency.max_waiters", c.Idempotency.MaxWaiters, 64},
		{"idempotency.key_syntax", c.Idempotency.KeySyntax, "strict"},
		{"request_id_header", c.RequestIDHeader, "X-Request-Id"},
		{"idempotency.drop_headers", c.Idempotency.DropHeaders, []string{}},
		{"idempotency.encryption_key_env", c.Idempotency.EncryptionKeyEnv, ""},
		{"sessions.queue_depth", c.Sessions.QueueDepth, 4},
		{"sessions.queue_timeout", c.Sessions.QueueTimeout, 30 * time.Second},
		{"sessions.lease", c.Sessions.Lease, 10 * time.Second},
		{"mode", c.Mode, "enforce"},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			t.Parallel()
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Errorf("Default().%s = %#v; want %#v", tt.key, tt.got, tt.want)
			}
		})
	}
}

func TestDefaultIsFresh(t *testing.T) {
	t.Parallel()
	a := Default()
	a.Idempotency.Identity.JWT.Claims[0] = "X-Changed"
	a.Idempotency.ReleaseStatuses[0] = 599
	a.Idempotency.TenantHosts["x.example"] = "x"
	a.Store.Redis.Addrs[0] = "changed:1"
	if b := Default(); !reflect.DeepEqual(b.Idempotency.Identity.JWT.Claims, []string{"iss", "sub"}) ||
		b.Idempotency.ReleaseStatuses[0] != 307 || len(b.Idempotency.TenantHosts) != 0 || b.Store.Redis.Addrs[0] != "127.0.0.1:6379" {
		t.Errorf("Default() shares state with an earlier result: %+v", b)
	}
}

func TestDefaultNeedsOnlyURL(t *testing.T) {
	t.Parallel()
	c := Default()
	if err := c.Validate(); err == nil {
		t.Fatalf("Default().Validate() = nil; want upstream.url required")
	}
	c.Upstream.URL = "http://127.0.0.1:3000"
	if err := c.Validate(); err != nil {
		t.Errorf("Validate() = %v; want nil", err)
	}
}

func TestRouteTable(t *testing.T) {
	t.Parallel()
	c, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	table, templates, err := c.RouteTable()
	if err != nil {
		t.Fatalf("RouteTable = %v; want nil", err)
	}
	if len(templates) != len(c.Routes) {
		t.Fatalf("len(templates) = %d; want %d", len(templates), len(c.Routes))
	}
	tests := []struct {
		method, path string
		want         string // route name, "" for none
		param        string // the session parameter's value
	}{
		{"PUT", "/ucp/v1/checkout-sessions/Ab%2F1", "update_checkout", "Ab%2F1"},
		{"GET", "/ucp/v1/checkout-sessions/x", "get_checkout", "x"},
		{"HEAD", "/ucp/v1/checkout-sessions/x", "", ""},
		{"POST", "/ucp/v1/carts", "create_cart", ""},
		{"POST", "/ucp/v1/carts/", "", ""},
		{"POST", "/ucp/v1/carts/c1/items", "add_item", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			i, ok := table.Lookup(tt.method, tt.path)
			got := ""
			if ok {
				got = c.Routes[i].Name
			}
			if got != tt.want {
				t.Fatalf("Lookup(%q, %q) = %q; want %q", tt.method, tt.path, got, tt.want)
			}
			if !ok || c.Routes[i].Session == nil || c.Routes[i].Session.Param == "" {
				return
			}
			v, _ := templates[i].Param(tt.path, c.Routes[i].Session.Param)
			if v != tt.param {
				t.Errorf("session param = %q; want %q", v, tt.param)
			}
		})
	}
}

// TestRouteTableMatch checks the table's normalized matching: protection
// comes from each route, and path_case from the config.
func TestRouteTableMatch(t *testing.T) {
	t.Parallel()
	c, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	c.Routes = append(c.Routes, Route{Name: "plain", Method: "POST", Path: "/ucp/v1/plain/{id}"})
	table, _, err := c.RouteTable()
	if err != nil {
		t.Fatalf("RouteTable = %v; want nil", err)
	}
	tests := []struct {
		method, path string
		want         string // route name, "" for none
		protected    bool
		param        string // the session parameter's value
		err          error
	}{
		{"put", "/UCP/v1/checkout-sessions/Ab%7E1/", "update_checkout", true, "Ab~1", nil},
		{"GET", "//ucp/v1/checkout-sessions/x;v=1", "", false, "", pathtmpl.ErrAmbiguousPath},
		{"GET", "/ucp/v1/checkout-sessions/x", "get_checkout", true, "x", nil},
		{"post", "/ucp/v1/carts/", "create_cart", true, "", nil},
		{"POST", "/ucp/v1/plain/x", "plain", false, "", nil},
		{"POST", "/ucp/v1/plain/x;y", "plain", false, "", nil},
		{"POST", "/ucp/v1/carts%2Fc1%2Fitems", "", false, "", pathtmpl.ErrAmbiguousPath},
		{"POST", "/../ucp/v1/carts", "", false, "", pathtmpl.ErrInvalidPath},
		{"HEAD", "/ucp/v1/checkout-sessions/x", "", false, "", nil},
	}
	for _, tt := range tests {
		m, ok, err := table.Match(tt.method, tt.path)
		if !errors.Is(err, tt.err) {
			t.Errorf("Match(%s, %q) error = %v; want %v", tt.method, tt.path, err, tt.err)
			continue
		}
		got := ""
		if ok {
			got = c.Routes[m.Index].Name
		}
		if got != tt.want || ok && m.Protected != tt.protected {
			t.Errorf("Match(%s, %q) = %q (protected %v); want %q (%v)", tt.method, tt.path, got, m.Protected, tt.want, tt.protected)
		}
		if s := c.Routes[m.Index].Session; ok && s != nil && s.Param != "" {
			if v, _ := m.Param(s.Param); v != tt.param {
				t.Errorf("Match(%s, %q) session id = %q; want %q", tt.method, tt.path, v, tt.param)
			}
		}
	}

	c.PathCase = PathCaseSensitive
	table, _, err = c.RouteTable()
	if err != nil {
		t.Fatalf("RouteTable(sensitive) = %v", err)
	}
	if _, ok, err := table.Match("PUT", "/UCP/v1/checkout-sessions/1"); ok || err != nil {
		t.Errorf("sensitive Match(PUT, /UCP/...) = %v, %v; want no match", ok, err)
	}
	if m, ok, err := table.Match("PUT", "/ucp/v1/checkout-sessions/1/"); !ok || err != nil || c.Routes[m.Index].Name != "update_checkout" {
		t.Errorf("sensitive Match(PUT, /ucp/...) = %v, %v; want update_checkout", ok, err)
	}
	c.PathCase = "upper"
	if _, _, err := c.RouteTable(); err == nil {
		t.Errorf("RouteTable(path_case upper) = nil; want error")
	}
}

func TestRouteProtected(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		r    Route
		want bool
	}{
		{Route{}, false},
		{Route{Idempotent: true}, true},
		{Route{RequireKey: true}, true},
		{Route{Session: &Session{Header: "X-Cart-Id"}}, true},
		{Route{RateLimit: &RateLimit{Requests: 1, Per: time.Second}}, true},
		{Route{Mode: ModeObserve, Timeout: time.Second, Protocol: ProtocolGraphQL}, false},
	} {
		if got := tt.r.Protected(); got != tt.want {
			t.Errorf("%+v.Protected() = %v; want %v", tt.r, got, tt.want)
		}
	}
}

func TestRouteTableErrors(t *testing.T) {
	t.Parallel()
	c := Default()
	c.Routes = []Route{{Name: "a", Method: "GET", Path: "/a/{x}"}, {Name: "b", Method: "GET", Path: "/{y}/b"}}
	if _, _, err := c.RouteTable(); err == nil {
		t.Errorf("RouteTable(ambiguous) = nil; want error")
	}
	c.Routes = []Route{{Name: "a", Method: "GET", Path: "a"}}
	if _, _, err := c.RouteTable(); err == nil {
		t.Errorf("RouteTable(bad path) = nil; want error")
	}
}

func TestEffective(t *testing.T) {
	t.Parallel()
	up := Upstream{Timeout: time.Minute}
	r := Route{}
	if got := r.EffectiveMode(ModeObserve); got != ModeObserve {
		t.Errorf("EffectiveMode = %q; want %q", got, ModeObserve)
	}
	if got := r.EffectiveTimeout(up); got != time.Minute {
		t.Errorf("EffectiveTimeout = %v; want %v", got, time.Minute)
	}
	r = Route{Mode: ModeEnforce, Timeout: time.Second}
	if got := r.EffectiveMode(ModeObserve); got != ModeEnforce {
		t.Errorf("EffectiveMode = %q; want %q", got, ModeEnforce)
	}
	if got := r.EffectiveTimeout(up); got != time.Second {
		t.Errorf("EffectiveTimeout = %v; want %v", got, time.Second)
	}
}

func TestNormalizeHost(t *testing.T) {
	t.Parallel()
	tests := []struct{ host, want string }{
		{"shop-a.example", "shop-a.example"},
		{"Shop-A.Example", "shop-a.example"},
		{"Shop-A.Example:8443", "shop-a.example"},
		{"shop-a.example:", "shop-a.example"},
		{"shop-a.example.", "shop-a.example"},
		{"SHOP-A.example.:80", "shop-a.example"},
		{"shop-a.example..", "shop-a.example."},
		{"shop-a.example..:443", "shop-a.example."},
		{"shop-a.example:x", "shop-a.example:x"},
		{"shop-a.example:80x", "shop-a.example:80x"},
		{"shop-a.example: 80", "shop-a.example: 80"},
		{"[::1]:80", "::1"},
		{"[::1]", "::1"},
		{"[::1]:", "::1"},
		{"[::1]x", "[::1]x"},
		{"[::1", "[::1"},
		{"[2001:DB8:0::1]:443", "2001:db8::1"},
		{"2001:DB8::1", "2001:db8::1"},
		{"[fe80::1%25eth0]", "fe80::1%25eth0"},
		{"192.0.2.1:8080", "192.0.2.1"},
		{"XN--BCHER-KVA.Example", "xn--bcher-kva.example"},
		{"b\u00fccher.example", "b\u00fccher.example"}, // not converted to punycode
		{"B\u00dcCHER.example", "b\u00dccher.example"}, // only ASCII letters fold
		{"shop-\u212a.example", "shop-\u212a.example"}, // the Kelvin sign is not "k"
		{"", ""},
	}
	for _, tt := range tests {
		if got := NormalizeHost(tt.host); got != tt.want {
			t.Errorf("NormalizeHost(%q) = %q; want %q", tt.host, got, tt.want)
		}
		if got := NormalizeHost(tt.want); got != tt.want && !strings.HasSuffix(tt.want, ".") && tt.want != "[::1" {
			t.Errorf("NormalizeHost(%q) = %q; want it unchanged", tt.want, got)
		}
	}
}

func TestTenantFor(t *testing.T) {
	t.Parallel()
	id := Idempotency{
		TenantHosts: map[string]string{"shop-a.example": "a", "shop-b.example": "b", "xn--bcher-kva.example": "p", "::1": "v6", "192.0.2.1": "v4"},
	}
	tests := []struct {
		host, tenant string
		ok           bool
	}{
		{"shop-a.example", "a", true},
		{"Shop-A.Example:8443", "a", true},
		{"shop-a.example.", "a", true},
		{"shop-b.example.", "b", true},
		{"SHOP-B.EXAMPLE.:443", "b", true},
		{"shop-a.example..", "", false},
		{"shop-a.example:x", "", false},
		{"[::1]:80", "v6", true},
		{"[0:0::1]", "v6", true},
		{"192.0.2.1:8080", "v4", true},
		{"xn--bcher-kva.example", "p", true},
		{"XN--BCHER-KVA.EXAMPLE.", "p", true},
		{"b\u00fccher.example", "", false},
		{"shop-c.example", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		if got, ok := id.TenantFor(tt.host); got != tt.tenant || ok != tt.ok {
			t.Errorf("TenantFor(%q) = %q, %v; want %q, %v", tt.host, got, ok, tt.tenant, tt.ok)
		}
	}
	constant := Idempotency{Tenant: "shop", TenantHosts: map[string]string{}}
	for _, host := range []string{"shop-a.example", "anything.example.", "", "[::1]:80"} {
		if got, ok := constant.TenantFor(host); got != "shop" || !ok {
			t.Errorf("without tenant_hosts, TenantFor(%q) = %q, %v; want %q, true", host, got, ok, "shop")
		}
	}
}

func TestPrefixes(t *testing.T) {
	t.Parallel()
	c := ClientIP{TrustedProxies: []string{"10.1.2.3/8", "192.0.2.7", "fd00::/8", "2001:db8::1"}}
	got, err := c.Prefixes()
	if err != nil {
		t.Fatalf("Prefixes = %v; want nil", err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("fd00::/8"),
		netip.MustParsePrefix("2001:db8::1/128"),
	}
	if !slices.Equal(got, want) {
		t.Errorf("Prefixes = %v; want %v", got, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "nope", "fe80::1%eth0", ""} {
		c := ClientIP{TrustedProxies: []string{"10.0.0.0/8", bad}}
		if _, err := c.Prefixes(); err == nil {
			t.Errorf("Prefixes(%q) = nil error; want error", bad)
		}
	}
}
