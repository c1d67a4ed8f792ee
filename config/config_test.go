package config

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"
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
	// DESIGN spells the default identity out, which configures it: the
	// sources are the default's.
	want.Idempotency.Identity.Headers = []string{"Authorization"}
	if d := Default(); !reflect.DeepEqual(got.Idempotency.IdentitySources(), d.Idempotency.IdentitySources()) {
		t.Errorf("design.yaml's identity sources = %+v; want the default's %+v", got.Idempotency.IdentitySources(), d.Idempotency.IdentitySources())
	}
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
		{"idempotency.require_identity", c.Idempotency.RequireIdentity, false},
		{"idempotency.tenant", c.Idempotency.Tenant, ""},
		{"idempotency.tenant_hosts", c.Idempotency.TenantHosts, map[string]string{}},
		{"idempotency.retention", c.Idempotency.Retention, 25 * time.Hour},
		{"idempotency.lease", c.Idempotency.Lease, 120 * time.Second},
		{"idempotency.max_lease", c.Idempotency.MaxLease, 60 * time.Minute},
		{"idempotency.max_body_bytes", c.Idempotency.MaxBodyBytes, int64(1048576)},
		{"idempotency.max_response_bytes", c.Idempotency.MaxResponseBytes, int64(65536)},
		{"idempotency.replay_header", c.Idempotency.ReplayHeader, "Idempotent-Replayed"},
		{"idempotency.reuse_status", c.Idempotency.ReuseStatus, 409},
		{"idempotency.release_statuses", c.Idempotency.ReleaseStatuses, []int{400, 401, 403, 404, 405, 408, 409, 413, 415, 422, 425, 429, 503}},
		{"idempotency.drop_headers", c.Idempotency.DropHeaders, []string{}},
		{"idempotency.encryption_key_env", c.Idempotency.EncryptionKeyEnv, ""},
		{"sessions.queue_depth", c.Sessions.QueueDepth, 4},
		{"sessions.queue_timeout", c.Sessions.QueueTimeout, 30 * time.Second},
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
		b.Idempotency.ReleaseStatuses[0] != 400 || len(b.Idempotency.TenantHosts) != 0 || b.Store.Redis.Addrs[0] != "127.0.0.1:6379" {
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

func TestNormalizeHostAndTenantFor(t *testing.T) {
	t.Parallel()
	id := Idempotency{
		Tenant:      "default",
		TenantHosts: map[string]string{"shop.example.com": "a", "2001:db8::1": "v6", "192.0.2.1": "v4"},
	}
	tests := []struct {
		host, norm, tenant string
	}{
		{"shop.example.com", "shop.example.com", "a"},
		{"Shop.Example.COM", "shop.example.com", "a"},
		{"shop.example.com:8443", "shop.example.com", "a"},
		{"shop.example.com.", "shop.example.com", "a"},
		{"SHOP.example.com.:80", "shop.example.com", "a"},
		{"[2001:DB8::1]:443", "2001:db8::1", "v6"},
		{"[2001:db8::1]", "2001:db8::1", "v6"},
		{"2001:db8::1", "2001:db8::1", "v6"},
		{"192.0.2.1:8080", "192.0.2.1", "v4"},
		{"other.example.com", "other.example.com", "default"},
		{"", "", "default"},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			t.Parallel()
			if got := NormalizeHost(tt.host); got != tt.norm {
				t.Errorf("NormalizeHost(%q) = %q; want %q", tt.host, got, tt.norm)
			}
			if got := id.TenantFor(tt.host); got != tt.tenant {
				t.Errorf("TenantFor(%q) = %q; want %q", tt.host, got, tt.tenant)
			}
		})
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
