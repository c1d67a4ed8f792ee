package config

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/modes"
)

// validConfig returns a valid configuration with DESIGN.md's routes.
func validConfig() *Config {
	c := Default()
	c.Upstream.URL = "http://127.0.0.1:3000"
	c.Routes = []Route{
		{Name: "create_cart", Method: "POST", Path: "/ucp/v1/carts", Idempotent: true, RateLimit: &RateLimit{Requests: 600, Per: time.Minute}},
		{Name: "update_checkout", Method: "PUT", Path: "/ucp/v1/checkout-sessions/{id}", Idempotent: true, Session: &Session{Param: "id"}},
		{Name: "get_checkout", Method: "GET", Path: "/ucp/v1/checkout-sessions/{id}", Session: &Session{Param: "id"}},
	}
	return c
}

func TestValidateRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
		key    string // the line must start with key + ": "
		err    error
		also   []string // more text the line must contain
	}{
		// Listeners and sizes.
		{"listen without port", func(c *Config) { c.Listen = "8080" }, "listen", ErrInvalid, nil},
		{"listen empty", func(c *Config) { c.Listen = "" }, "listen", ErrInvalid, nil},
		{"admin_host with port", func(c *Config) { c.AdminHost = "admin.example.com:9090" }, "admin_host", ErrInvalid, nil},
		{"admin_host with scheme", func(c *Config) { c.AdminHost = "http://admin.example.com" }, "admin_host", ErrInvalid, nil},
		{"admin_listen port range", func(c *Config) { c.AdminListen = ":99999" }, "admin_listen", ErrInvalid, nil},
		{"admin_listen named port", func(c *Config) { c.AdminListen = ":http" }, "admin_listen", ErrInvalid, nil},
		{"admin_listen same port", func(c *Config) { c.AdminListen = "0.0.0.0:8080" }, "admin_listen", ErrConflict, nil},
		{"max_buffered_bytes zero", func(c *Config) { c.MaxBufferedBytes = 0 }, "max_buffered_bytes", ErrRange, nil},
		{"max_buffered_bytes below body", func(c *Config) { c.MaxBufferedBytes = 1000 }, "max_buffered_bytes", ErrRange, []string{"1000 is less than idempotency.max_body_bytes (1048576, the default)"}},
		{"max_buffered_bytes_per_client negative", func(c *Config) { c.MaxBufferedBytesPerClient = -1 }, "max_buffered_bytes_per_client", ErrRange, nil},
		{"max_buffered_bytes_per_client over budget", func(c *Config) { c.MaxBufferedBytesPerClient = c.MaxBufferedBytes + 1 }, "max_buffered_bytes_per_client", ErrRange, []string{"max_buffered_bytes"}},
		{"max_buffered_bytes_per_client below body", func(c *Config) { c.MaxBufferedBytesPerClient = 1000 }, "max_buffered_bytes_per_client", ErrRange, []string{"max_body_bytes"}},
		{"max_header_bytes small", func(c *Config) { c.MaxHeaderBytes = 4095 }, "max_header_bytes", ErrRange, nil},
		{"max_header_bytes huge", func(c *Config) { c.MaxHeaderBytes = 16<<20 + 1 }, "max_header_bytes", ErrRange, nil},
		{"max_connections zero", func(c *Config) { c.MaxConnections = 0 }, "max_connections", ErrRange, nil},
		{"max_connections huge", func(c *Config) { c.MaxConnections = 1_000_001 }, "max_connections", ErrRange, nil},
		{"request_body_timeout zero", func(c *Config) { c.RequestBodyTimeout = 0 }, "request_body_timeout", ErrRange, nil},
		{"mode", func(c *Config) { c.Mode = "Enforce" }, "mode", ErrInvalid, nil},
		{"sessions.queue_depth", func(c *Config) { c.Sessions.QueueDepth = -1 }, "sessions.queue_depth", ErrRange, nil},
		{"sessions.queue_timeout", func(c *Config) { c.Sessions.QueueTimeout = 0 }, "sessions.queue_timeout", ErrRange, nil},
		{"sessions.lease", func(c *Config) { c.Sessions.Lease = 50 * time.Millisecond }, "sessions.lease", ErrRange, nil},

		// Waiting, error shapes and per-route policy (issue 16).
		{"in_progress", func(c *Config) { c.Idempotency.InProgress = "queue" }, "idempotency.in_progress", ErrInvalid, nil},
		{"wait_timeout", func(c *Config) { c.Idempotency.WaitTimeout = 0 }, "idempotency.wait_timeout", ErrRange, nil},
		{"max_waiters", func(c *Config) { c.Idempotency.MaxWaiters = -1 }, "idempotency.max_waiters", ErrRange, nil},
		{"key_syntax", func(c *Config) { c.Idempotency.KeySyntax = "sf_string" }, "idempotency.key_syntax", ErrInvalid, []string{`"strict", "printable" or "sf-string"`}},
		{"request_id_header", func(c *Config) { c.RequestIDHeader = "Request Id" }, "request_id_header", ErrInvalid, nil},
		{"request_id_header empty", func(c *Config) { c.RequestIDHeader = "" }, "request_id_header", ErrInvalid, nil},
		{"request_id_header is the key header", func(c *Config) { c.RequestIDHeader = "idempotency-key" }, "request_id_header", ErrConflict, nil},
		{"release_statuses 3xx", func(c *Config) { c.Idempotency.ReleaseStatuses = []int{307, 308, 302} }, "idempotency.release_statuses[2]", ErrRange, []string{"307, 308"}},
		{"route in_progress", func(c *Config) { c.Routes[0].InProgress = "Wait" }, "routes[0].in_progress", ErrInvalid, nil},
		{"route wait_timeout", func(c *Config) { c.Routes[0].WaitTimeout = -time.Second }, "routes[0].wait_timeout", ErrRange, nil},
		{"route retention below max_lease", func(c *Config) { c.Routes[0].Retention = time.Minute }, "routes[0].retention", ErrRange, []string{"max_lease"}},
		{"route release_statuses", func(c *Config) { c.Routes[0].ReleaseStatuses = []int{422, 4} }, "routes[0].release_statuses[1]", ErrRange, []string{"4xx"}},
		{"route drop_headers", func(c *Config) { c.Routes[0].DropHeaders = []string{"Set Cookie"} }, "routes[0].drop_headers[0]", ErrInvalid, nil},
		{"route policy on a read", func(c *Config) { c.Routes[2].Retention = 48 * time.Hour }, "routes[2].retention", ErrConflict, nil},
		{"errors broken template", func(c *Config) { c.Errors.Body = `{"code":{{json .Code}}` }, "errors.body", ErrInvalid, nil},
		{"errors template not JSON", func(c *Config) { c.Errors.Body = `{"code":{{.Code}}}` }, "errors.body", ErrInvalid, []string{"not valid JSON"}},
		{"errors unknown field", func(c *Config) { c.Errors.Body = `{"code":{{json .Message}}}` }, "errors.body", ErrInvalid, nil},
		{"errors unknown code", func(c *Config) { c.Errors.Codes = map[string]string{"key_invalid": "invalid_request"} }, "errors.codes[key_invalid]", ErrInvalid, nil},
		{"route errors merged over global", func(c *Config) {
			c.Errors.ContentType = "text/plain"
			c.Errors.Body = "{{.Code}}"
			c.Routes[0].Errors = &Errors{ContentType: "application/json"}
		}, "routes[0].errors.body", ErrInvalid, []string{"not valid JSON"}},
		{"route errors extensions off graphql", func(c *Config) { c.Routes[0].Errors = &Errors{Extensions: `{"class":"CONFLICT"}`} }, "routes[0].errors.extensions", ErrConflict, nil},

		// Methods: IANA's registry plus extra_methods (issue 30).
		{"method misspelt", func(c *Config) { c.Routes[0].Method = "POTS" }, "routes[0].method", ErrInvalid, []string{`"POTS" is not a registered HTTP method`, "did you mean POST?", "extra_methods"}},
		{"method unregistered", func(c *Config) { c.Routes[0].Method = "PURGE" }, "routes[0].method", ErrInvalid, []string{"extra_methods"}},
		{"method lower case", func(c *Config) { c.Routes[0].Method = "post" }, "routes[0].method", ErrInvalid, []string{"upper-case"}},
		{"extra_methods lower case", func(c *Config) { c.ExtraMethods = []string{"purge"} }, "extra_methods[0]", ErrInvalid, nil},
		{"extra_methods not a token", func(c *Config) { c.ExtraMethods = []string{"MY METHOD"} }, "extra_methods[0]", ErrInvalid, nil},
		{"extra_methods registered", func(c *Config) { c.ExtraMethods = []string{"PATCH"} }, "extra_methods[0]", ErrInvalid, []string{"registered"}},
		{"extra_methods twice", func(c *Config) { c.ExtraMethods = []string{"PURGE", "PURGE"} }, "extra_methods[1]", ErrDuplicate, nil},

		// Upstream.
		{"upstream.url missing", func(c *Config) { c.Upstream.URL = "" }, "upstream.url", ErrRequired, nil},
		{"upstream.url not absolute", func(c *Config) { c.Upstream.URL = "/api" }, "upstream.url", ErrInvalid, nil},
		{"upstream.url host:port", func(c *Config) { c.Upstream.URL = "127.0.0.1:3000" }, "upstream.url", ErrInvalid, nil},
		{"upstream.url scheme", func(c *Config) { c.Upstream.URL = "ftp://x" }, "upstream.url", ErrInvalid, nil},
		{"upstream.url no host", func(c *Config) { c.Upstream.URL = "http://" }, "upstream.url", ErrInvalid, nil},
		{"upstream.timeout zero", func(c *Config) { c.Upstream.Timeout = 0 }, "upstream.timeout", ErrRange, nil},
		{"upstream.timeout negative", func(c *Config) { c.Upstream.Timeout = -time.Second }, "upstream.timeout", ErrRange, nil},
		{"upstream.host", func(c *Config) { c.Upstream.Host = "rewrite" }, "upstream.host", ErrInvalid, nil},

		// TLS.
		{"tls.mode", func(c *Config) { c.TLS.Mode = "auto" }, "tls.mode", ErrInvalid, nil},
		{"tls files cert_file", func(c *Config) { c.TLS = TLS{Mode: TLSFiles, KeyFile: "k"} }, "tls.cert_file", ErrRequired, nil},
		{"tls files key_file", func(c *Config) { c.TLS = TLS{Mode: TLSFiles, CertFile: "c"} }, "tls.key_file", ErrRequired, nil},
		{"tls files with acme keys", func(c *Config) { c.TLS = TLS{Mode: TLSFiles, CertFile: "c", KeyFile: "k", Email: "a@b.c"} }, "tls.mode", ErrConflict, nil},
		{"tls none with cert_file", func(c *Config) { c.TLS.CertFile = "c" }, "tls.mode", ErrConflict, nil},
		{"tls acme with cert_file", func(c *Config) { c.TLS = TLS{Mode: TLSACME, Domains: []string{"a.example"}, CertFile: "c"} }, "tls.mode", ErrConflict, nil},
		{"tls acme no domains", func(c *Config) { c.TLS = TLS{Mode: TLSACME, Email: "a@b.c"} }, "tls.domains", ErrRequired, nil},
		{"tls acme wildcard", func(c *Config) { c.TLS = TLS{Mode: TLSACME, Domains: []string{"*.example.com"}} }, "tls.domains[0]", ErrInvalid, nil},
		{"tls acme bad email", func(c *Config) { c.TLS = TLS{Mode: TLSACME, Domains: []string{"a.example"}, Email: "nobody"} }, "tls.email", ErrInvalid, nil},
		{"tls acme http ca", func(c *Config) { c.TLS = TLS{Mode: TLSACME, Domains: []string{"a.example"}, CA: "http://ca/dir"} }, "tls.ca", ErrInvalid, nil},
		{"tls on_demand.allow", func(c *Config) {
			c.TLS = TLS{Mode: TLSACME, OnDemand: OnDemand{Allow: []string{"*.ok.example", "bad host"}}}
		}, "tls.on_demand.allow[1]", ErrInvalid, nil},
		{"tls on_demand.allow any name", func(c *Config) {
			c.TLS = TLS{Mode: TLSACME, OnDemand: OnDemand{Allow: []string{".ok.example", "*"}}}
		}, "tls.on_demand.allow[1]", ErrInvalid, nil},
		{"tls on_demand.allow bare dot", func(c *Config) {
			c.TLS = TLS{Mode: TLSACME, OnDemand: OnDemand{Allow: []string{"."}}}
		}, "tls.on_demand.allow[0]", ErrInvalid, nil},
		{"tls on_demand.allow double dot", func(c *Config) {
			c.TLS = TLS{Mode: TLSACME, OnDemand: OnDemand{Allow: []string{"*..ok.example"}}}
		}, "tls.on_demand.allow[0]", ErrInvalid, nil},
		{"tls files with storage_dir", func(c *Config) {
			c.TLS = TLS{Mode: TLSFiles, CertFile: "c", KeyFile: "k", StorageDir: "/var/lib/x"}
		}, "tls.mode", ErrConflict, []string{"storage_dir"}},
		{"tls none with http_listen", func(c *Config) { c.TLS.HTTPListen = ":80" }, "tls.mode", ErrConflict, nil},
		{"tls acme storage_dir with redis", func(c *Config) {
			c.Store.Backend = StoreRedis
			c.TLS = TLS{Mode: TLSACME, Domains: []string{"a.example"}, StorageDir: "/var/lib/idemgate"}
		}, "tls.storage_dir", ErrConflict, []string{"Redis"}},
		{"tls http_listen invalid", func(c *Config) {
			c.TLS = TLS{Mode: TLSACME, Domains: []string{"a.example"}, HTTPListen: "80"}
		}, "tls.http_listen", ErrInvalid, nil},
		{"tls acme default http_listen on listen's port", func(c *Config) {
			c.Listen = ":80"
			c.TLS = TLS{Mode: TLSACME, Domains: []string{"a.example"}}
		}, "tls.http_listen", ErrConflict, []string{`":80"`, "listen"}},
		{"tls files http_listen on admin port", func(c *Config) {
			c.TLS = TLS{Mode: TLSFiles, CertFile: "c", KeyFile: "k", HTTPListen: "127.0.0.1:9090"}
		}, "tls.http_listen", ErrConflict, []string{"admin_listen"}},

		// Store.
		{"store.backend", func(c *Config) { c.Store.Backend = "etcd" }, "store.backend", ErrInvalid, nil},
		{"store.memory.max_entries", func(c *Config) { c.Store.Memory.MaxEntries = 0 }, "store.memory.max_entries", ErrRange, nil},
		{"store.memory.max_bytes", func(c *Config) { c.Store.Memory.MaxBytes = -1 }, "store.memory.max_bytes", ErrRange, nil},
		{"redis addrs empty", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.Redis.Addrs = nil }, "store.redis.addrs", ErrRequired, nil},
		{"redis addrs for limiter", func(c *Config) { c.Limiter.Backend = LimiterRedis; c.Store.Redis.Addrs = []string{} }, "store.redis.addrs", ErrRequired, nil},
		{"redis addr without port", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.Redis.Addrs = []string{"a:1", "localhost"} }, "store.redis.addrs[1]", ErrInvalid, nil},
		{"redis addr without host", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.Redis.Addrs = []string{":6379"} }, "store.redis.addrs[0]", ErrInvalid, nil},
		{"sentinel password without master_name", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.Redis.SentinelPassword = "s" }, "store.redis.sentinel_password", ErrConflict, []string{"master_name"}},
		{"sentinel username without master_name", func(c *Config) { c.Limiter.Backend = LimiterRedis; c.Store.Redis.SentinelUsername = "u" }, "store.redis.sentinel_username", ErrConflict, []string{"master_name"}},
		{"redis db", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.Redis.DB = -1 }, "store.redis.db", ErrRange, nil},
		{"redis key prefix open brace", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.Redis.KeyPrefix = "shop{1}:" }, "store.redis.key_prefix", ErrInvalid, nil},
		{"redis key prefix close brace", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.Redis.KeyPrefix = "shop}" }, "store.redis.key_prefix", ErrInvalid, nil},
		{"redis timeout", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.Redis.Timeout = 0 }, "store.redis.timeout", ErrRange, nil},
		{"record format", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.Redis.RecordFormat = "string" }, "store.redis.record_format", ErrInvalid, nil},
		{"compression", func(c *Config) { c.Store.Compression = "gzip" }, "store.compression", ErrInvalid, nil},
		{"compression spelled in capitals", func(c *Config) { c.Store.Compression = "ZSTD" }, "store.compression", ErrInvalid, nil},
		{"record format spelled in capitals", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.Redis.RecordFormat = "Hash" }, "store.redis.record_format", ErrInvalid, nil},
		{"replay cache entries", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.Redis.ReplayCache.MaxEntries = -1 }, "store.redis.replay_cache.max_entries", ErrRange, nil},
		{"replay cache bytes", func(c *Config) { c.Store.Backend = StoreRedis; c.Store.Redis.ReplayCache.MaxBytes = 0 }, "store.redis.replay_cache.max_bytes", ErrRange, nil},

		// Client address and limits.
		{"trusted_proxies", func(c *Config) { c.ClientIP.TrustedProxies = []string{"10.0.0.0/8", "10.0.0.0/33"} }, "client_ip.trusted_proxies[1]", ErrInvalid, nil},
		{"trusted_proxies name", func(c *Config) { c.ClientIP.TrustedProxies = []string{"proxy.local"} }, "client_ip.trusted_proxies[0]", ErrInvalid, nil},
		{"edge_limit.rate negative", func(c *Config) { c.EdgeLimit.Rate = -1 }, "edge_limit.rate", ErrRange, nil},
		{"edge_limit.rate NaN", func(c *Config) { c.EdgeLimit.Rate = math.NaN() }, "edge_limit.rate", ErrRange, nil},
		{"edge_limit.burst", func(c *Config) { c.EdgeLimit.Burst = -1 }, "edge_limit.burst", ErrRange, nil},
		{"limiter.backend", func(c *Config) { c.Limiter.Backend = "memory" }, "limiter.backend", ErrInvalid, nil},
		{"limiter.max_clients", func(c *Config) { c.Limiter.MaxClients = 0 }, "limiter.max_clients", ErrRange, nil},

		// Idempotency.
		{"header empty", func(c *Config) { c.Idempotency.Header = "" }, "idempotency.header", ErrRequired, nil},
		{"header invalid", func(c *Config) { c.Idempotency.Header = "Idempotency Key" }, "idempotency.header", ErrInvalid, nil},
		{"identity_headers", func(c *Config) { c.Idempotency.IdentityHeaders = []string{"Authorization", "X:Y"} }, "idempotency.identity_headers[1]", ErrInvalid, nil},
		{"require_identity without headers", func(c *Config) {
			c.Idempotency.RequireIdentity = true
			c.Idempotency.IdentityHeaders = []string{}
		}, "idempotency.require_identity", ErrConflict, nil},
		{"tenant_hosts port", func(c *Config) { c.Idempotency.TenantHosts = map[string]string{"a.example:443": "a"} }, "idempotency.tenant_hosts[a.example:443]", ErrInvalid, nil},
		{"tenant_hosts upper case", func(c *Config) { c.Idempotency.TenantHosts = map[string]string{"A.example": "a"} }, "idempotency.tenant_hosts[A.example]", ErrInvalid, nil},
		{"tenant_hosts bad name", func(c *Config) { c.Idempotency.TenantHosts = map[string]string{"a b": "a"} }, "idempotency.tenant_hosts[a b]", ErrInvalid, nil},
		{"tenant_hosts empty tenant", func(c *Config) { c.Idempotency.TenantHosts = map[string]string{"a.example": ""} }, "idempotency.tenant_hosts[a.example]", ErrRequired, nil},
		{"lease zero", func(c *Config) { c.Idempotency.Lease = 0 }, "idempotency.lease", ErrRange, nil},
		{"max_lease below lease", func(c *Config) { c.Idempotency.MaxLease, c.Idempotency.LateAnswerWait = time.Minute, 0 }, "idempotency.max_lease", ErrRange, nil},
		{"retention below max_lease", func(c *Config) { c.Idempotency.Retention = 30 * time.Minute }, "idempotency.retention", ErrRange,
			[]string{"30m must exceed idempotency.max_lease (1h, the default)"}},
		{"retention equals max_lease", func(c *Config) { c.Idempotency.Retention, c.Idempotency.MaxLease = 2*time.Hour, 2*time.Hour }, "idempotency.retention", ErrRange,
			[]string{"2h must exceed idempotency.max_lease (2h)"}},
		{"default retention below max_lease", func(c *Config) { c.Idempotency.MaxLease = 30 * time.Hour }, "idempotency.retention", ErrRange,
			[]string{"25h (the default) must exceed idempotency.max_lease (30h)"}},
		{"max_lease below default lease", func(c *Config) { c.Idempotency.MaxLease, c.Idempotency.LateAnswerWait = time.Minute, 0 }, "idempotency.max_lease", ErrRange,
			[]string{"1m is less than idempotency.lease (2m, the default)"}},
		{"lease below a second", func(c *Config) { c.Idempotency.Lease = 999 * time.Millisecond }, "idempotency.lease", ErrRange, []string{"999ms is shorter than 1s"}},
		{"route timeout over max_lease", func(c *Config) { c.Routes[1].Timeout = 2 * time.Hour }, "routes[1].timeout", ErrRange,
			[]string{"2h exceeds idempotency.max_lease (1h, the default)", "run the write twice"}},
		{"upstream timeout over max_lease", func(c *Config) {
			c.Upstream.Timeout = 2 * time.Hour
			c.Routes[1].Timeout = time.Minute
		}, "routes[0].timeout", ErrRange, []string{"is not set, so upstream.timeout (2h) applies, which exceeds idempotency.max_lease (1h, the default)"}},
		{"default upstream timeout over max_lease", func(c *Config) {
			c.Idempotency.Lease, c.Idempotency.MaxLease, c.Idempotency.LateAnswerWait = 10*time.Second, 30*time.Second, 0
			c.Routes[1].Timeout = 30 * time.Second
		}, "routes[0].timeout", ErrRange, []string{"upstream.timeout (1m, the default) applies, which exceeds idempotency.max_lease (30s)"}},
		{"late wait past max_lease", func(c *Config) { c.Routes[1].Timeout = 56 * time.Minute }, "routes[1].late_answer_wait", ErrRange,
			[]string{"is not set, so idempotency.late_answer_wait (5m, the default) applies; routes[1].timeout (56m) plus it exceeds idempotency.max_lease (1h, the default)", "run the write twice"}},
		{"route late wait past max_lease", func(c *Config) {
			d := 2 * time.Hour
			c.Routes[1].LateAnswerWait = &d
		}, "routes[1].late_answer_wait", ErrRange, []string{"routes[1].late_answer_wait (2h) plus upstream.timeout (1m, the default) exceeds idempotency.max_lease (1h, the default)"}},
		{"route late wait negative", func(c *Config) {
			d := -time.Second
			c.Routes[1].LateAnswerWait = &d
		}, "routes[1].late_answer_wait", ErrRange, nil},
		{"route late wait not idempotent", func(c *Config) {
			d := time.Second
			c.Routes[2].LateAnswerWait = &d
		}, "routes[2].late_answer_wait", ErrConflict, nil},
		{"late_answer_wait negative", func(c *Config) { c.Idempotency.LateAnswerWait = -time.Second }, "idempotency.late_answer_wait", ErrRange, nil},
		{"late_answer_max zero", func(c *Config) { c.Idempotency.LateAnswerMax = 0 }, "idempotency.late_answer_max", ErrRange, nil},
		{"unknown_outcome", func(c *Config) { c.Idempotency.UnknownOutcome = "wait" }, "idempotency.unknown_outcome", ErrInvalid, nil},
		{"route unknown_outcome", func(c *Config) { c.Routes[1].UnknownOutcome = "Hold" }, "routes[1].unknown_outcome", ErrInvalid, nil},
		{"route unknown_outcome not idempotent", func(c *Config) { c.Routes[2].UnknownOutcome = modes.UnknownHold }, "routes[2].unknown_outcome", ErrConflict, nil},
		{"release_statuses success", func(c *Config) { c.Idempotency.ReleaseStatuses = []int{503, 201} }, "idempotency.release_statuses[1]", ErrRange, []string{"a 2xx answer means the write ran"}},
		{"release_statuses redirect", func(c *Config) { c.Idempotency.ReleaseStatuses = []int{303} }, "idempotency.release_statuses[0]", ErrRange, nil},
		{"max_body_bytes", func(c *Config) { c.Idempotency.MaxBodyBytes = 0 }, "idempotency.max_body_bytes", ErrRange, nil},
		{"max_response_bytes", func(c *Config) { c.Idempotency.MaxResponseBytes = -5 }, "idempotency.max_response_bytes", ErrRange, nil},
		{"replay_header", func(c *Config) { c.Idempotency.ReplayHeader = "Replayed?" }, "idempotency.replay_header", ErrInvalid, nil},
		{"reuse_status", func(c *Config) { c.Idempotency.ReuseStatus = 400 }, "idempotency.reuse_status", ErrInvalid, nil},
		{"release_statuses high", func(c *Config) { c.Idempotency.ReleaseStatuses = []int{503, 600} }, "idempotency.release_statuses[1]", ErrRange, nil},
		{"release_statuses low", func(c *Config) { c.Idempotency.ReleaseStatuses = []int{99} }, "idempotency.release_statuses[0]", ErrRange, nil},
		{"drop_headers", func(c *Config) { c.Idempotency.DropHeaders = []string{""} }, "idempotency.drop_headers[0]", ErrInvalid, nil},
		{"encryption_key_env", func(c *Config) { c.Idempotency.EncryptionKeyEnv = "1KEY" }, "idempotency.encryption_key_env", ErrInvalid, nil},

		// Routes.
		{"route name empty", func(c *Config) { c.Routes[1].Name = "" }, "routes[1].name", ErrRequired, nil},
		{"route name charset", func(c *Config) { c.Routes[1].Name = "update checkout" }, "routes[1].name", ErrInvalid, nil},
		{"route name duplicate", func(c *Config) { c.Routes[2].Name = "create_cart" }, "routes[2].name", ErrDuplicate, []string{"routes[0]"}},
		{"route method empty", func(c *Config) { c.Routes[0].Method = "" }, "routes[0].method", ErrRequired, nil},
		{"route method lower case", func(c *Config) { c.Routes[0].Method = "post" }, "routes[0].method", ErrInvalid, nil},
		{"route method not a token", func(c *Config) { c.Routes[0].Method = "PO ST" }, "routes[0].method", ErrInvalid, nil},
		{"route path empty", func(c *Config) { c.Routes[0].Path = "" }, "routes[0].path", ErrRequired, nil},
		{"route path invalid", func(c *Config) { c.Routes[0].Path = "/ucp//carts" }, "routes[0].path", ErrInvalid, []string{"empty segment"}},
		{"route path relative", func(c *Config) { c.Routes[0].Path = "ucp/v1/carts" }, "routes[0].path", ErrInvalid, nil},
		{"idempotent GET", func(c *Config) { c.Routes[2].Idempotent = true }, "routes[2].idempotent", ErrConflict, []string{"GET"}},
		{"idempotent HEAD", func(c *Config) { c.Routes[2].Method = "HEAD"; c.Routes[2].Idempotent = true }, "routes[2].idempotent", ErrConflict, nil},
		{"idempotent OPTIONS", func(c *Config) { c.Routes[2].Method = "OPTIONS"; c.Routes[2].Idempotent = true }, "routes[2].idempotent", ErrConflict, nil},
		{"idempotent TRACE", func(c *Config) { c.Routes[2].Method = "TRACE"; c.Routes[2].Idempotent = true }, "routes[2].idempotent", ErrConflict, nil},
		{"require_key not idempotent", func(c *Config) { c.Routes[2].RequireKey = true }, "routes[2].require_key", ErrConflict, nil},
		{"fingerprint_ignore not idempotent", func(c *Config) { c.Routes[2].FingerprintIgnore = []string{"/a"} }, "routes[2].fingerprint_ignore", ErrConflict, nil},
		{"fingerprint_ignore no slash", func(c *Config) { c.Routes[0].FingerprintIgnore = []string{"/ok", "meta/sent_at"} }, "routes[0].fingerprint_ignore[1]", ErrInvalid, nil},
		{"fingerprint_ignore whole document", func(c *Config) { c.Routes[0].FingerprintIgnore = []string{""} }, "routes[0].fingerprint_ignore[0]", ErrInvalid, nil},
		{"fingerprint_ignore bad escape", func(c *Config) { c.Routes[0].FingerprintIgnore = []string{"/a~2b"} }, "routes[0].fingerprint_ignore[0]", ErrInvalid, nil},
		{"fingerprint_ignore trailing tilde", func(c *Config) { c.Routes[0].FingerprintIgnore = []string{"/a~"} }, "routes[0].fingerprint_ignore[0]", ErrInvalid, nil},
		{"route timeout", func(c *Config) { c.Routes[0].Timeout = -time.Second }, "routes[0].timeout", ErrRange, nil},
		{"route protocol", func(c *Config) { c.Routes[0].Protocol = "grpc" }, "routes[0].protocol", ErrInvalid, nil},
		{"route mode", func(c *Config) { c.Routes[0].Mode = "dry-run" }, "routes[0].mode", ErrInvalid, nil},
		{"session param missing", func(c *Config) { c.Routes[1].Session = &Session{Param: "cart"} }, "routes[1].session", ErrInvalid, []string{"cart", "{cart}"}},
		{"session on path without params", func(c *Config) { c.Routes[0].Session = &Session{Param: "id"} }, "routes[0].session", ErrInvalid, nil},
		{"session both", func(c *Config) { c.Routes[1].Session = &Session{Param: "id", Header: "X-Cart-Id"} }, "routes[1].session", ErrConflict, nil},
		{"session neither", func(c *Config) { c.Routes[1].Session = &Session{} }, "routes[1].session", ErrRequired, nil},
		{"session header", func(c *Config) { c.Routes[1].Session = &Session{Header: "X Cart"} }, "routes[1].session.header", ErrInvalid, nil},
		{"ambiguous routes", func(c *Config) {
			c.Routes = append(c.Routes,
				Route{Name: "by_kind", Method: "GET", Path: "/ucp/v1/{kind}/{id}"},
				Route{Name: "by_session", Method: "GET", Path: "/ucp/{v}/checkout-sessions/{id}"})
		}, "routes[4].path", ErrAmbiguous, []string{`"by_session"`, `"by_kind"`, "routes[3]", "/ucp/v1/checkout-sessions/{id}"}},
		{"trailing slash route", func(c *Config) {
			c.Routes = append(c.Routes, Route{Name: "carts_slash", Method: "POST", Path: "/ucp/v1/carts/"})
		}, "routes[3].path", ErrAmbiguous, []string{`"carts_slash"`, `"create_cart"`, "path_case insensitive"}},
		{"other case", func(c *Config) {
			c.Routes = append(c.Routes, Route{Name: "carts_upper", Method: "POST", Path: "/UCP/v1/Carts"})
		}, "routes[3].path", ErrAmbiguous, []string{`"carts_upper"`, `"create_cart"`}},
		{"other encoding", func(c *Config) {
			c.Routes = append(c.Routes, Route{Name: "carts_enc", Method: "POST", Path: "/ucp/v1/%63arts"})
		}, "routes[3].path", ErrAmbiguous, []string{`"carts_enc"`, `"create_cart"`}},
		{"path_case", func(c *Config) { c.PathCase = "Insensitive" }, "path_case", ErrInvalid, nil},
		{"path_case empty", func(c *Config) { c.PathCase = "" }, "path_case", ErrInvalid, nil},
		{"route path with ;", func(c *Config) { c.Routes[0].Path = "/ucp/v1/carts;v=1" }, "routes[0].path", ErrInvalid, []string{"parameters"}},
		{"route path with %2F", func(c *Config) { c.Routes[0].Path = "/ucp/v1/a%2Fb" }, "routes[0].path", ErrInvalid, []string{"separator"}},
		{"tenant with tenant_hosts", func(c *Config) {
			c.Idempotency.Tenant = "shop"
			c.Idempotency.TenantHosts = map[string]string{"a.example": "a"}
		}, "idempotency.tenant", ErrConflict, []string{"421"}},
		{"tenant_hosts duplicate", func(c *Config) { c.Idempotency.TenantHosts = map[string]string{"a.example": "a", "a.example.": "b"} }, "idempotency.tenant_hosts[a.example.]", ErrDuplicate, []string{`"a.example"`}},
		{"tenant_hosts non-ascii", func(c *Config) { c.Idempotency.TenantHosts = map[string]string{"b\u00fccher.example": "a"} }, "idempotency.tenant_hosts[b\u00fccher.example]", ErrInvalid, []string{"punycode"}},
		{"tenant_hosts ipv6 not canonical", func(c *Config) { c.Idempotency.TenantHosts = map[string]string{"2001:DB8::1": "a"} }, "idempotency.tenant_hosts[2001:DB8::1]", ErrInvalid, nil},
		{"identical routes", func(c *Config) {
			c.Routes = append(c.Routes, Route{Name: "again", Method: "PUT", Path: "/ucp/v1/checkout-sessions/{cid}"})
		}, "routes[3].path", ErrAmbiguous, []string{`"again"`, `"update_checkout"`}},
		{"rate_limit requests", func(c *Config) { c.Routes[0].RateLimit.Requests = 0 }, "routes[0].rate_limit.requests", ErrRange, nil},
		{"rate_limit per", func(c *Config) { c.Routes[0].RateLimit.Per = 0 }, "routes[0].rate_limit.per", ErrRange, nil},
		{"rate_limit algorithm", func(c *Config) { c.Routes[0].RateLimit.Algorithm = "leaky" }, "routes[0].rate_limit.algorithm", ErrInvalid, nil},
		{"rate_limit block token_bucket", func(c *Config) { c.Routes[0].RateLimit.Block = time.Minute }, "routes[0].rate_limit.block", ErrConflict, nil},
		{"rate_limit block negative", func(c *Config) {
			c.Routes[0].RateLimit.Algorithm = AlgorithmWindow
			c.Routes[0].RateLimit.Block = -time.Second
		}, "routes[0].rate_limit.block", ErrRange, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tt.mutate(c)
			err := c.Validate()
			lines := errorLines(t, err)
			if !errors.Is(err, tt.err) {
				t.Errorf("error %q does not wrap %v", err, tt.err)
			}
			if len(lines) != 1 {
				t.Errorf("got %d lines %q; want 1", len(lines), lines)
			}
			var line string
			for _, l := range lines {
				if strings.HasPrefix(l, tt.key+": ") {
					line = l
				}
			}
			if line == "" {
				t.Fatalf("got %q; want a line starting %q", lines, tt.key+": ")
			}
			for _, s := range tt.also {
				if !strings.Contains(line, s) {
					t.Errorf("got %q; want it to contain %q", line, s)
				}
			}
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"no routes", func(c *Config) { c.Routes = nil }},
		{"sentinel credentials", func(c *Config) {
			c.Store.Backend = StoreRedis
			c.Store.Redis.MasterName = "mymaster"
			c.Store.Redis.SentinelUsername, c.Store.Redis.SentinelPassword = "sentinel-user", "s"
		}},
		{"replay cache disabled", func(c *Config) {
			c.Store.Backend = StoreRedis
			c.Store.Redis.ReplayCache = ReplayCache{MaxEntries: 0, MaxBytes: 0}
		}},
		{"https upstream with path", func(c *Config) { c.Upstream.URL = "https://api.internal:8443/base" }},
		{"upstream host", func(c *Config) { c.Upstream.Host = HostUpstream }},
		{"bare IPv4 trusted proxy", func(c *Config) { c.ClientIP.TrustedProxies = []string{"192.0.2.1"} }},
		{"bare IPv6 trusted proxy", func(c *Config) { c.ClientIP.TrustedProxies = []string{"2001:db8::1", "fd00::/8"} }},
		{"tls files", func(c *Config) { c.TLS = TLS{Mode: TLSFiles, CertFile: "c.pem", KeyFile: "k.pem"} }},
		{"tls acme", func(c *Config) {
			c.TLS = TLS{Mode: TLSACME, Domains: []string{"Shop.Example.com"}, Email: "ops@example.com", CA: "https://ca.example/dir", CARoot: "root.pem"}
		}},
		{"tls acme on demand only", func(c *Config) {
			c.TLS = TLS{Mode: TLSACME, OnDemand: OnDemand{Allow: []string{"*.shops.example", "one.example", ".tenants.example"}}}
		}},
		{"tls acme storage_dir and http_listen", func(c *Config) {
			c.Listen = ":443"
			c.TLS = TLS{Mode: TLSACME, Domains: []string{"a.example"}, StorageDir: "/var/lib/idemgate/certs", HTTPListen: ":8081"}
		}},
		{"tls acme on redis", func(c *Config) {
			c.Store.Backend = StoreRedis
			c.TLS = TLS{Mode: TLSACME, Domains: []string{"a.example"}}
		}},
		{"tls files with redirect listener", func(c *Config) {
			c.TLS = TLS{Mode: TLSFiles, CertFile: "c.pem", KeyFile: "k.pem", HTTPListen: ":8081"}
		}},
		{"redis store", func(c *Config) {
			c.Store.Backend = StoreRedis
			c.Store.Redis.Addrs = []string{"redis-0:26379", "[::1]:26379"}
			c.Store.Redis.MasterName = "m"
		}},
		{"memory store ignores redis addrs", func(c *Config) { c.Store.Redis.Addrs = nil }},
		{"edge limit off", func(c *Config) { c.EdgeLimit = EdgeLimit{} }},
		{"replay header off", func(c *Config) { c.Idempotency.ReplayHeader = "" }},
		{"reuse 422", func(c *Config) { c.Idempotency.ReuseStatus = 422 }},
		{"no identity headers", func(c *Config) { c.Idempotency.IdentityHeaders = nil }},
		{"lease equals max_lease, retention just above", func(c *Config) {
			c.Idempotency.Lease, c.Idempotency.MaxLease, c.Idempotency.Retention = time.Hour, time.Hour, time.Hour+time.Second
		}},
		{"lease the minimum", func(c *Config) { c.Idempotency.Lease = time.Second }},
		{"route timeout equals max_lease", func(c *Config) { c.Routes[0].Timeout, c.Idempotency.LateAnswerWait = c.Idempotency.MaxLease, 0 }},
		{"upstream timeout equals max_lease", func(c *Config) { c.Upstream.Timeout, c.Idempotency.LateAnswerWait = c.Idempotency.MaxLease, 0 }},
		{"route timeout plus late wait equals max_lease", func(c *Config) { c.Routes[0].Timeout = c.Idempotency.MaxLease - 5*time.Minute }},
		{"route late wait 0 with a timeout of max_lease", func(c *Config) {
			zero := time.Duration(0)
			c.Routes[0].Timeout, c.Routes[0].LateAnswerWait = c.Idempotency.MaxLease, &zero
		}},
		{"long timeout on a route that is not idempotent", func(c *Config) { c.Routes[2].Timeout = 5 * time.Hour }},
		{"long upstream timeout, idempotent routes shorter", func(c *Config) {
			c.Upstream.Timeout = 2 * time.Hour
			c.Routes[0].Timeout, c.Routes[1].Timeout = time.Minute, 55*time.Minute
		}},
		{"redis lease short for its timeout (a warning)", func(c *Config) {
			c.Store.Backend = StoreRedis
			c.Idempotency.Lease = time.Second
			c.Store.Redis.Timeout = 3 * time.Second
		}},
		{"short lease with the memory store", func(c *Config) {
			c.Store.Redis.Timeout = time.Minute // Redis unused
			c.Idempotency.Lease = 2 * time.Second
		}},
		{"release 4xx and 5xx", func(c *Config) { c.Idempotency.ReleaseStatuses = []int{400, 599} }},
		{"tenant hosts", func(c *Config) {
			c.Idempotency.TenantHosts = map[string]string{"shop.example.com": "a", "192.0.2.1": "b", "2001:db8::1": "c", "xn--bcher-kva.example": "d"}
		}},
		{"tenant without tenant_hosts", func(c *Config) { c.Idempotency.Tenant = "shop" }},
		{"queue depth zero", func(c *Config) { c.Sessions.QueueDepth = 0 }},
		{"max_waiters zero", func(c *Config) { c.Idempotency.MaxWaiters = 0 }},
		{"key syntaxes", func(c *Config) { c.Idempotency.KeySyntax = modes.KeySyntaxSFString }},
		{"request_id_header", func(c *Config) { c.RequestIDHeader = "Request-Id" }},
		{"listen port zero twice", func(c *Config) { c.Listen, c.AdminListen = "127.0.0.1:0", "127.0.0.1:0" }},
		{"listen hosts", func(c *Config) { c.Listen, c.AdminListen = "[::1]:8080", "localhost:9090" }},
		{"observe", func(c *Config) { c.Mode = ModeObserve; c.Routes[0].Mode = ModeEnforce }},
		{"graphql", func(c *Config) { c.Routes[0].Protocol = ProtocolGraphQL }},
		{"session header", func(c *Config) { c.Routes[0].Session = &Session{Header: "X-Cart-Id"} }},
		{"window", func(c *Config) {
			c.Routes[0].RateLimit = &RateLimit{Requests: 1, Per: time.Second, Algorithm: AlgorithmWindow}
		}},
		{"window block", func(c *Config) {
			c.Routes[0].RateLimit = &RateLimit{Requests: 1, Per: time.Second, Algorithm: AlgorithmWindow, Block: time.Minute}
		}},
		{"fingerprint pointers", func(c *Config) { c.Routes[0].FingerprintIgnore = []string{"/meta/sent_at", "/a~0b/~1c", "/"} }},
		{"more literal route", func(c *Config) {
			c.Routes = append(c.Routes, Route{Name: "current", Method: "GET", Path: "/ucp/v1/checkout-sessions/current"})
		}},
		{"same path other method", func(c *Config) {
			c.Routes = append(c.Routes, Route{Name: "head", Method: "HEAD", Path: "/ucp/v1/checkout-sessions/{id}"})
		}},
		{"other case, path_case sensitive", func(c *Config) {
			c.PathCase = PathCaseSensitive
			c.Routes = append(c.Routes, Route{Name: "carts_upper", Method: "POST", Path: "/UCP/v1/carts"})
		}},
		{"DELETE idempotent", func(c *Config) {
			c.Routes = append(c.Routes, Route{Name: "del", Method: "DELETE", Path: "/ucp/v1/carts/{id}", Idempotent: true, RequireKey: true})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tt.mutate(c)
			if err := c.Validate(); err != nil {
				t.Errorf("Validate() = %v; want nil", err)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
listen: "8080"
upstream:
  host: upstreams
idempotency:
  reuse_status: 400
  lease: 2h
routes:
  - name: a
    method: GET
    path: /a/{x}
    idempotent: true
    session: y
  - name: a
    method: GET
    path: /{y}/b
`))
	if err != nil {
		t.Fatalf("Parse = %v; want nil", err)
	}
	lines := errorLines(t, c.Validate())
	want := []string{
		"listen: ",
		"upstream.url: ",
		"upstream.host: ",
		"idempotency.max_lease: ",
		"idempotency.reuse_status: ",
		"routes[0].idempotent: ",
		"routes[0].session: ",
		"routes[1].name: ",
		"routes[1].path: ",
	}
	if len(lines) != len(want) {
		t.Errorf("got %d lines:\n%s\nwant %d", len(lines), strings.Join(lines, "\n"), len(want))
	}
	for _, w := range want {
		if !hasLinePrefix(lines, w) {
			t.Errorf("got:\n%s\nwant a line starting %q", strings.Join(lines, "\n"), w)
		}
	}
}

func TestWarnings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*Config)
		want   []string
	}{
		{"defaults", func(*Config) {}, nil},
		{"redis, defaults", func(c *Config) { c.Store.Backend = StoreRedis }, nil},
		{"redis, lease six timeouts", func(c *Config) {
			c.Store.Backend = StoreRedis
			c.Idempotency.Lease = 3 * time.Second
		}, nil},
		{"redis, lease short for the default timeout", func(c *Config) {
			c.Store.Backend = StoreRedis
			c.Idempotency.Lease = 2 * time.Second
		}, []string{"idempotency.lease: 2s is shorter than 6 × store.redis.timeout (500ms, the default) = 3s: "}},
		{"redis, default lease short for a long timeout", func(c *Config) {
			c.Store.Backend = StoreRedis
			c.Store.Redis.Timeout = 30 * time.Second
		}, []string{"idempotency.lease: 2m (the default) is shorter than 6 × store.redis.timeout (30s) = 3m: "}},
		{"limit by header, no trusted proxy", func(c *Config) {
			c.Routes = append(c.Routes, Route{Name: "by_key", Method: "GET", Path: "/by-key", RateLimit: &RateLimit{Requests: 2, Per: time.Minute, By: "header:x-api-key"}})
		}, []string{`routes[3].rate_limit.by: "header:x-api-key" counts per value of a header any client can set`}},
		{"limit by header behind a trusted proxy", func(c *Config) {
			c.ClientIP.TrustedProxies = []string{"10.0.0.0/8"}
			c.Routes = append(c.Routes, Route{Name: "by_key", Method: "GET", Path: "/by-key", RateLimit: &RateLimit{Requests: 2, Per: time.Minute, By: "header:X-Api-Key"}})
		}, nil},
		{"limit by address, no trusted proxy", func(c *Config) {
			c.Routes = append(c.Routes, Route{Name: "by_ip", Method: "GET", Path: "/by-ip", RateLimit: &RateLimit{Requests: 2, Per: time.Minute, By: "client_ip"}})
		}, nil},
		{"memory store, long redis timeout", func(c *Config) {
			c.Idempotency.Lease = time.Second
			c.Store.Redis.Timeout = time.Minute
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validConfig()
			tt.mutate(c)
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate = %v; want nil (a warning never refuses)", err)
			}
			got := c.Warnings()
			if len(got) != len(tt.want) {
				t.Fatalf("Warnings = %v; want %d", got, len(tt.want))
			}
			for i, w := range got {
				if !strings.HasPrefix(w.String(), tt.want[i]) {
					t.Errorf("warning %q; want it to start %q", w, tt.want[i])
				}
			}
		})
	}
}

func TestValidateHasNoSideEffects(t *testing.T) {
	t.Parallel()
	a, err := Load("testdata/full.yaml")
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	b, _ := Load("testdata/full.yaml")
	a.Routes[0].RateLimit.Algorithm = ""
	b.Routes[0].RateLimit.Algorithm = ""
	a.Idempotency.Header = "x-lower"
	b.Idempotency.Header = "x-lower"
	_ = a.Validate()
	_, _, _ = a.RouteTable()
	if !reflect.DeepEqual(a, b) {
		t.Errorf("Validate or RouteTable changed the config:\n%+v\nwant\n%+v", a, b)
	}
}

func TestFieldError(t *testing.T) {
	t.Parallel()
	c := validConfig()
	c.Idempotency.ReuseStatus = 400
	var fe *FieldError
	if !errors.As(c.Validate(), &fe) {
		t.Fatalf("errors.As(*FieldError) = false; want true")
	}
	if fe.Key != "idempotency.reuse_status" || fe.Err != ErrInvalid {
		t.Errorf("FieldError = %+v; want key idempotency.reuse_status, ErrInvalid", fe)
	}
	if got, want := fe.Error(), "idempotency.reuse_status: 400: want 409 or 422"; got != want {
		t.Errorf("Error() = %q; want %q", got, want)
	}
	if got := (&FieldError{Msg: "whole"}).Error(); got != "whole" {
		t.Errorf("Error() without key = %q; want %q", got, "whole")
	}
}

func TestEffectiveHTTPListen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		tls  TLS
		want string
	}{
		{TLS{Mode: TLSNone}, ""},
		{TLS{Mode: TLSFiles}, ""},
		{TLS{Mode: TLSFiles, HTTPListen: ":8081"}, ":8081"},
		{TLS{Mode: TLSACME}, ":80"},
		{TLS{Mode: TLSACME, HTTPListen: "127.0.0.1:8081"}, "127.0.0.1:8081"},
	}
	for _, tt := range tests {
		if got := tt.tls.EffectiveHTTPListen(); got != tt.want {
			t.Errorf("%+v.EffectiveHTTPListen() = %q; want %q", tt.tls, got, tt.want)
		}
	}
}

// TestMethods: every method of IANA's registry, and those listed in
// extra_methods, may be a route's method.
func TestMethods(t *testing.T) {
	t.Parallel()
	if len(RegisteredMethods) != 39 {
		t.Errorf("%d registered methods; the registry has 39 (and the reserved \"*\")", len(RegisteredMethods))
	}
	for _, m := range append(slices.Clone(RegisteredMethods), "PURGE", "QUERY") {
		c := validConfig()
		c.ExtraMethods = []string{"PURGE", "QUERY"}
		c.Routes[0].Method = m
		c.Routes[0].Idempotent = !safeMethods[m]
		if err := c.Validate(); err != nil {
			t.Errorf("method %s: %v", m, err)
		}
	}
}
