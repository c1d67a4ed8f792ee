package config

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/mail"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/internal/modes"
	"github.com/idemgate/idemgate/internal/pathtmpl"
	"github.com/idemgate/idemgate/internal/problem"
	"github.com/idemgate/idemgate/internal/rediskey"
	"golang.org/x/net/http/httpguts"
)

// Sentinel errors wrapped by the [*FieldError] values that
// [Config.Validate] reports.
var (
	// ErrRequired means a required value is missing.
	ErrRequired = errors.New("required")
	// ErrInvalid means a malformed value, or one outside its allowed set.
	ErrInvalid = errors.New("invalid")
	// ErrRange means a number or duration out of range.
	ErrRange = errors.New("out of range")
	// ErrConflict means values that contradict each other.
	ErrConflict = errors.New("conflict")
	// ErrDuplicate means a route name used twice.
	ErrDuplicate = errors.New("duplicate")
	// ErrAmbiguous means two routes with the same method that can match the
	// same request equally well.
	ErrAmbiguous = errors.New("ambiguous routes")
)

// FieldError is one problem in a configuration. Its message is one line:
// "key: what is wrong".
type FieldError struct {
	// Key is the problem's key path, like "routes[2].session" or
	// "idempotency.reuse_status"; empty for the document as a whole.
	Key string
	// Msg says what is wrong, in words for the operator.
	Msg string
	// Err is the sentinel the error wraps, such as [ErrRequired].
	Err error
}

// Error returns "Key: Msg".
func (e *FieldError) Error() string {
	if e.Key == "" {
		return e.Msg
	}
	return e.Key + ": " + e.Msg
}

// Unwrap returns the sentinel.
func (e *FieldError) Unwrap() error { return e.Err }

// problems collects field errors.
type problems []error

func (p *problems) add(key string, sentinel error, format string, args ...any) {
	*p = append(*p, &FieldError{Key: key, Msg: fmt.Sprintf(format, args...), Err: sentinel})
}

// Validate checks c and reports every problem it finds, joined with
// [errors.Join]: each is a [*FieldError], one line, naming its key and
// wrapping a sentinel such as [ErrRequired] or [ErrAmbiguous]. It returns nil
// when c is valid. It has no side effects and does not read the environment
// or the file system.
func (c *Config) Validate() error {
	var p problems
	c.validateTop(&p)
	c.validateUpstream(&p)
	c.validateTLS(&p)
	c.validateStore(&p)
	c.validateLimits(&p)
	c.validateIdempotency(&p)
	c.validateExtraMethods(&p)
	c.validateRoutes(&p)
	checkErrors(&p, "errors", c.Errors.spec(), c.Errors)
	return errors.Join(p...)
}

func (c *Config) validateTop(p *problems) {
	checkListen(p, "listen", c.Listen)
	checkListen(p, "admin_listen", c.AdminListen)
	if h := c.AdminHost; h != "" && !validHost(strings.ToLower(h)) {
		p.add("admin_host", ErrInvalid, "%q: want a host name or IP address without port or scheme, like \"idemgate-admin.example.com\"", h)
	}
	if sameListener(c.Listen, c.AdminListen) {
		p.add("admin_listen", ErrConflict, "%q uses the same port as listen %q", c.AdminListen, c.Listen)
	}
	if c.MaxBufferedBytes <= 0 {
		p.add("max_buffered_bytes", ErrRange, "must be > 0; got %d", c.MaxBufferedBytes)
	} else if c.MaxBufferedBytes < c.Idempotency.MaxBodyBytes {
		p.add("max_buffered_bytes", ErrRange, "%s is less than %s: such a body could never be buffered",
			own(c.MaxBufferedBytes, defaults.MaxBufferedBytes),
			ref("idempotency.max_body_bytes", c.Idempotency.MaxBodyBytes, defaults.Idempotency.MaxBodyBytes))
	}
	switch {
	case c.MaxBufferedBytesPerClient < 0:
		p.add("max_buffered_bytes_per_client", ErrRange, "must be >= 0 (0: a quarter of max_buffered_bytes); got %d", c.MaxBufferedBytesPerClient)
	case c.MaxBufferedBytesPerClient > 0 && c.MaxBufferedBytesPerClient > c.MaxBufferedBytes:
		p.add("max_buffered_bytes_per_client", ErrRange, "%d is more than max_buffered_bytes %d", c.MaxBufferedBytesPerClient, c.MaxBufferedBytes)
	case c.MaxBufferedBytesPerClient > 0 && c.MaxBufferedBytesPerClient < c.Idempotency.MaxBodyBytes:
		p.add("max_buffered_bytes_per_client", ErrRange, "%d is less than %s: such a body could never be buffered",
			c.MaxBufferedBytesPerClient, ref("idempotency.max_body_bytes", c.Idempotency.MaxBodyBytes, defaults.Idempotency.MaxBodyBytes))
	}
	if c.MaxHeaderBytes < 4096 || c.MaxHeaderBytes > MaxHeaderBytesCeiling {
		p.add("max_header_bytes", ErrRange, "must be from 4096 to %d; got %d", MaxHeaderBytesCeiling, c.MaxHeaderBytes)
	}
	if c.MaxConnections < 1 || c.MaxConnections > 1_000_000 {
		p.add("max_connections", ErrRange, "must be from 1 to 1000000; got %d", c.MaxConnections)
	}
	if c.RequestBodyTimeout <= 0 {
		p.add("request_body_timeout", ErrRange, "must be > 0; got %s", c.RequestBodyTimeout)
	}
	checkHeader(p, "request_id_header", c.RequestIDHeader)
	if strings.EqualFold(c.RequestIDHeader, c.Idempotency.Header) {
		p.add("request_id_header", ErrConflict, "%q is idempotency.header: a generated request ID would replace the client's key", c.RequestIDHeader)
	}
	checkMode(p, "mode", c.Mode, false)
	c.validateProfile(p)
	if _, err := pathtmpl.ParseCase(c.PathCase); err != nil || c.PathCase == "" {
		p.add("path_case", ErrInvalid, "%q: want %q or %q", c.PathCase, PathCaseInsensitive, PathCaseSensitive)
	}
	if c.Sessions.QueueDepth < 0 {
		p.add("sessions.queue_depth", ErrRange, "must be >= 0; got %d", c.Sessions.QueueDepth)
	}
	if c.Sessions.QueueTimeout <= 0 {
		p.add("sessions.queue_timeout", ErrRange, "must be > 0; got %s", c.Sessions.QueueTimeout)
	}
	if c.Sessions.Lease < 100*time.Millisecond {
		p.add("sessions.lease", ErrRange, "must be >= 100ms; got %s", c.Sessions.Lease)
	}
}

func (c *Config) validateUpstream(p *problems) {
	u := c.Upstream
	if u.URL == "" {
		p.add("upstream.url", ErrRequired, "is required, like \"http://127.0.0.1:3000\"")
	} else if err := checkHTTPURL(u.URL, false); err != nil {
		p.add("upstream.url", ErrInvalid, "%q: %v", u.URL, err)
	}
	if u.Timeout <= 0 {
		p.add("upstream.timeout", ErrRange, "must be > 0; got %s", u.Timeout)
	}
	if u.Host != HostPreserve && u.Host != HostUpstream {
		p.add("upstream.host", ErrInvalid, "%q: want %q or %q", u.Host, HostPreserve, HostUpstream)
	}
}

func (c *Config) validateTLS(p *problems) {
	t := c.TLS
	files := t.CertFile != "" || t.KeyFile != ""
	acme := len(t.Domains) > 0 || t.Email != "" || t.CA != "" || t.CARoot != "" || len(t.OnDemand.Allow) > 0 || t.StorageDir != ""
	switch t.Mode {
	case TLSNone:
		if files || acme || t.HTTPListen != "" {
			p.add("tls.mode", ErrConflict, "is %q, but other tls keys are set; set mode to %q or %q", t.Mode, TLSFiles, TLSACME)
		}
	case TLSFiles:
		if t.CertFile == "" {
			p.add("tls.cert_file", ErrRequired, "is required with tls.mode files")
		}
		if t.KeyFile == "" {
			p.add("tls.key_file", ErrRequired, "is required with tls.mode files")
		}
		if acme {
			p.add("tls.mode", ErrConflict, "is %q, but ACME keys (domains, email, ca, ca_root, on_demand, storage_dir) are set", t.Mode)
		}
	case TLSACME:
		if files {
			p.add("tls.mode", ErrConflict, "is %q, but cert_file or key_file is set", t.Mode)
		}
		if len(t.Domains) == 0 && len(t.OnDemand.Allow) == 0 {
			p.add("tls.domains", ErrRequired, "tls.mode acme needs domains or on_demand.allow")
		}
		for i, d := range t.Domains {
			if !validHost(strings.ToLower(d)) {
				p.add(fmt.Sprintf("tls.domains[%d]", i), ErrInvalid, "%q is not a host name (wildcards need DNS challenges, which idemgate does not do)", d)
			}
		}
		for i, d := range t.OnDemand.Allow {
			h := strings.ToLower(d)
			if rest, ok := strings.CutPrefix(h, "*."); ok {
				h = rest
			} else {
				h = strings.TrimPrefix(h, ".")
			}
			if !validHost(h) {
				p.add(fmt.Sprintf("tls.on_demand.allow[%d]", i), ErrInvalid, "%q: want a host name or a suffix like \"*.example.com\" or \".example.com\"", d)
			}
		}
		if t.Email != "" {
			if _, err := mail.ParseAddress(t.Email); err != nil {
				p.add("tls.email", ErrInvalid, "%q is not an e-mail address", t.Email)
			}
		}
		if t.CA != "" {
			if err := checkHTTPURL(t.CA, true); err != nil {
				p.add("tls.ca", ErrInvalid, "%q: %v", t.CA, err)
			}
		}
		if t.StorageDir != "" && c.Store.Backend == StoreRedis {
			p.add("tls.storage_dir", ErrConflict, "is set, but with store.backend %q certificates are kept in Redis, shared by the replicas; remove storage_dir", StoreRedis)
		}
	default:
		p.add("tls.mode", ErrInvalid, "%q: want %q, %q or %q", t.Mode, TLSNone, TLSFiles, TLSACME)
	}
	if t.HTTPListen != "" {
		checkListen(p, "tls.http_listen", t.HTTPListen)
	}
	if h := t.EffectiveHTTPListen(); h != "" {
		for _, other := range []struct{ key, addr string }{{"listen", c.Listen}, {"admin_listen", c.AdminListen}} {
			if sameListener(h, other.addr) {
				p.add("tls.http_listen", ErrConflict, "%q uses the same port as %s %q", h, other.key, other.addr)
			}
		}
	}
}

func (c *Config) validateStore(p *problems) {
	s := c.Store
	if s.Backend != StoreMemory && s.Backend != StoreRedis {
		p.add("store.backend", ErrInvalid, "%q: want %q or %q", s.Backend, StoreMemory, StoreRedis)
	}
	if s.Memory.MaxEntries <= 0 {
		p.add("store.memory.max_entries", ErrRange, "must be > 0; got %d", s.Memory.MaxEntries)
	}
	if s.Memory.MaxBytes <= 0 {
		p.add("store.memory.max_bytes", ErrRange, "must be > 0; got %d", s.Memory.MaxBytes)
	}
	if s.Compression != CompressionNone && s.Compression != CompressionZstd {
		p.add("store.compression", ErrInvalid, "%q: want %q or %q", s.Compression, CompressionNone, CompressionZstd)
	}
	if s.Backend != StoreRedis && c.Limiter.Backend != LimiterRedis {
		return // Redis is not used.
	}
	r := s.Redis
	if len(r.Addrs) == 0 {
		p.add("store.redis.addrs", ErrRequired, "at least one host:port is required when Redis is used")
	}
	for i, a := range r.Addrs {
		host, _, err := splitHostPort(a)
		if err == nil && host == "" {
			err = errors.New("missing host")
		}
		if err != nil {
			p.add(fmt.Sprintf("store.redis.addrs[%d]", i), ErrInvalid, "%q: %v", a, err)
		}
	}
	if r.MasterName == "" {
		// Credentials for sentinels that are not used would hide a
		// forgotten master_name: the addresses would be taken as a
		// server or a Cluster, and the sentinels' password dropped.
		for _, k := range [...]struct{ key, v string }{{"sentinel_username", r.SentinelUsername}, {"sentinel_password", r.SentinelPassword}} {
			if k.v != "" {
				p.add("store.redis."+k.key, ErrConflict, "is set, but store.redis.master_name is not: sentinel credentials are for Sentinel mode only")
			}
		}
	}
	if r.DB < 0 {
		p.add("store.redis.db", ErrRange, "must be >= 0; got %d", r.DB)
	}
	if rediskey.CheckPrefix(r.KeyPrefix) != nil {
		// Every key is prefix + "{" + hash tag + "}" (the store, the
		// limiters, the session locks, the TLS storage): a brace in the
		// prefix would move the hash tag, and a Cluster slot with it.
		p.add("store.redis.key_prefix", ErrInvalid, "%q: must not contain { or } (the keys' Redis Cluster hash tags follow it)", r.KeyPrefix)
	}
	if r.Timeout <= 0 {
		p.add("store.redis.timeout", ErrRange, "must be > 0; got %s", r.Timeout)
	}
	if r.RecordFormat != RecordCompact && r.RecordFormat != RecordHash {
		p.add("store.redis.record_format", ErrInvalid, "%q: want %q or %q", r.RecordFormat, RecordCompact, RecordHash)
	}
	if rc := r.ReplayCache; rc.MaxEntries < 0 {
		p.add("store.redis.replay_cache.max_entries", ErrRange, "must be >= 0 (0 disables the cache); got %d", rc.MaxEntries)
	} else if rc.MaxEntries > 0 && rc.MaxBytes <= 0 {
		p.add("store.redis.replay_cache.max_bytes", ErrRange, "must be > 0 while max_entries is > 0 (set max_entries: 0 to disable the cache); got %d", rc.MaxBytes)
	}
}

func (c *Config) validateLimits(p *problems) {
	for i, s := range c.ClientIP.TrustedProxies {
		if _, err := parsePrefix(s); err != nil {
			p.add(fmt.Sprintf("client_ip.trusted_proxies[%d]", i), ErrInvalid, "%q: want a CIDR like \"10.0.0.0/8\" or an IP address: %v", s, err)
		}
	}
	e := c.EdgeLimit
	if math.IsNaN(e.Rate) || math.IsInf(e.Rate, 0) || e.Rate < 0 {
		p.add("edge_limit.rate", ErrRange, "must be >= 0 (0 disables); got %v", e.Rate)
	} else if _, _, err := e.PerPeriod(); err != nil {
		p.add("edge_limit.rate", ErrRange, "%v", err)
	}
	if e.Burst < 0 {
		p.add("edge_limit.burst", ErrRange, "must be >= 0; got %d", e.Burst)
	}
	l := c.Limiter
	if l.Backend != LimiterLocal && l.Backend != LimiterRedis {
		p.add("limiter.backend", ErrInvalid, "%q: want %q or %q", l.Backend, LimiterLocal, LimiterRedis)
	}
	if l.MaxClients <= 0 {
		p.add("limiter.max_clients", ErrRange, "must be > 0; got %d", l.MaxClients)
	}
}

func (c *Config) validateIdempotency(p *problems) {
	id := c.Idempotency
	if id.Header == "" {
		p.add("idempotency.header", ErrRequired, "is required, like \"Idempotency-Key\"")
	} else {
		checkHeader(p, "idempotency.header", id.Header)
	}
	c.validateIdentity(p)
	if id.Tenant != "" && len(id.TenantHosts) > 0 {
		p.add("idempotency.tenant", ErrConflict, "%q is set together with idempotency.tenant_hosts; hosts without an entry get 421 tenant_unknown, never a shared tenant: remove one", id.Tenant)
	}
	groups := make(map[string][]string, len(id.TenantHosts))
	for h := range id.TenantHosts {
		n := NormalizeHost(h)
		groups[n] = append(groups[n], h)
	}
	for _, h := range slices.Sorted(maps.Keys(id.TenantHosts)) {
		tenant := id.TenantHosts[h]
		key := "idempotency.tenant_hosts[" + h + "]"
		n := NormalizeHost(h)
		switch {
		case !isASCII(h):
			p.add(key, ErrInvalid, "%q is not ASCII; write an internationalized name in IDNA punycode (xn--...), as clients send it", h)
		case len(groups[n]) > 1:
			// One line per group, on its last key.
			if same := slices.Sorted(slices.Values(groups[n])); h == same[len(same)-1] {
				p.add(key, ErrDuplicate, "%q is the same host %q as %q; keep one entry", h, n, same[:len(same)-1])
			}
		case h != n || !validHost(h):
			p.add(key, ErrInvalid, "%q: want a host name or IP address, without port or trailing dot", h)
		}
		if tenant == "" {
			p.add(key, ErrRequired, "the tenant must not be empty")
		}
	}
	if id.Lease < minLease {
		p.add("idempotency.lease", ErrRange, "%s is shorter than %s: a lease that short can end during a pause or a slow store call, and a retry would take over a request that still runs",
			own(id.Lease, defaults.Idempotency.Lease), fmtDur(minLease))
	}
	if id.MaxLease < id.Lease {
		p.add("idempotency.max_lease", ErrRange, "%s is less than %s: renewals stop at max_lease",
			own(id.MaxLease, defaults.Idempotency.MaxLease), ref("idempotency.lease", id.Lease, defaults.Idempotency.Lease))
	}
	if id.Retention <= id.MaxLease {
		p.add("idempotency.retention", ErrRange, "%s must exceed %s: a record must outlive its longest lease",
			own(id.Retention, defaults.Idempotency.Retention), ref("idempotency.max_lease", id.MaxLease, defaults.Idempotency.MaxLease))
	}
	if id.MaxBodyBytes <= 0 {
		p.add("idempotency.max_body_bytes", ErrRange, "must be > 0; got %d", id.MaxBodyBytes)
	}
	if id.MaxResponseBytes <= 0 {
		p.add("idempotency.max_response_bytes", ErrRange, "must be > 0; got %d", id.MaxResponseBytes)
	}
	if id.ReplayHeader != "" {
		checkHeader(p, "idempotency.replay_header", id.ReplayHeader)
	}
	if id.ReuseStatus != 409 && id.ReuseStatus != 422 {
		p.add("idempotency.reuse_status", ErrInvalid, "%d: want 409 or 422", id.ReuseStatus)
	}
	for i, s := range id.ReleaseStatuses {
		switch {
		case s < 100 || s > 599:
			p.add(fmt.Sprintf("idempotency.release_statuses[%d]", i), ErrRange, "%d: want an HTTP status from 400 to 599", s)
		case s == 307 || s == 308:
			// A temporary or permanent redirect: the write did not run here,
			// and the client sends it again elsewhere.
		case s < 400:
			p.add(fmt.Sprintf("idempotency.release_statuses[%d]", i), ErrRange, "%d: want 307, 308 or an HTTP status from 400 to 599: a %dxx answer means the write ran, and releasing its key would let a retry run it again", s, s/100)
		}
	}
	for i, h := range id.DropHeaders {
		checkHeader(p, fmt.Sprintf("idempotency.drop_headers[%d]", i), h)
	}
	checkInProgress(p, "idempotency", id.InProgress, false)
	if id.WaitTimeout <= 0 {
		p.add("idempotency.wait_timeout", ErrRange, "must be > 0; got %s", id.WaitTimeout)
	}
	if id.LateAnswerWait < 0 {
		p.add("idempotency.late_answer_wait", ErrRange, "must be >= 0 (0 cancels a write at its timeout); got %s", id.LateAnswerWait)
	}
	checkUnknownOutcome(p, "idempotency", id.UnknownOutcome, false)
	if id.LateAnswerMax <= 0 {
		p.add("idempotency.late_answer_max", ErrRange, "must be > 0 (to keep no call, set late_answer_wait: 0); got %d", id.LateAnswerMax)
	}
	if id.MaxWaiters < 0 {
		p.add("idempotency.max_waiters", ErrRange, "must be >= 0 (0: none wait); got %d", id.MaxWaiters)
	}
	switch id.KeySyntax {
	case modes.KeySyntaxStrict, modes.KeySyntaxPrintable, modes.KeySyntaxSFString:
	default:
		p.add("idempotency.key_syntax", ErrInvalid, "%q: want %q, %q or %q", id.KeySyntax, modes.KeySyntaxStrict, modes.KeySyntaxPrintable, modes.KeySyntaxSFString)
	}
	if id.EncryptionKeyEnv != "" && !validEnvName(id.EncryptionKeyEnv) {
		p.add("idempotency.encryption_key_env", ErrInvalid, "%q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", id.EncryptionKeyEnv)
	}
}

// validateIdentity checks idempotency.identity, the identity_headers alias
// and require_identity (DESIGN.md, "Identity").
func (c *Config) validateIdentity(p *problems) {
	id := &c.Idempotency
	for i, h := range id.IdentityHeaders {
		checkHeader(p, fmt.Sprintf("idempotency.identity_headers[%d]", i), h)
	}
	if id.IdentityHeaders != nil && id.Identity.configured() {
		p.add("idempotency.identity_headers", ErrConflict, "is the old spelling of idempotency.identity.headers; set one of identity_headers and identity, not both")
	}
	src := id.IdentitySources()
	jwtWithoutKeys := !id.Identity.JWT.Enabled() && !reflect.DeepEqual(id.Identity.JWT, defaultJWT())
	if id.RequireIdentity && !src.JWT.Enabled() && len(src.Headers) == 0 && len(src.Cookies) == 0 && !jwtWithoutKeys {
		p.add("idempotency.require_identity", ErrConflict, "is true, but idempotency.identity has no source (headers, cookies or jwt)")
	}
	ik := "idempotency.identity"
	in := &id.Identity
	j := &in.JWT
	for i, h := range in.Headers {
		key := fmt.Sprintf("%s.headers[%d]", ik, i)
		checkHeader(p, key, h)
		if j.Enabled() && h == j.TokenHeader() {
			p.add(key, ErrConflict, "%q is the JWT's own header: a jwt identity never also hashes the raw token; remove it", h)
		}
	}
	for i, name := range in.Cookies {
		key := fmt.Sprintf("%s.cookies[%d]", ik, i)
		if !httpguts.ValidHeaderFieldName(name) {
			p.add(key, ErrInvalid, "%q is not a valid cookie name", name)
		}
		if j.Enabled() && name == j.Cookie {
			p.add(key, ErrConflict, "%q is the JWT's own cookie: a jwt identity never also hashes the raw token; remove it", name)
		}
	}
	jk := ik + ".jwt"
	if !j.Enabled() {
		if !reflect.DeepEqual(*j, defaultJWT()) {
			p.add(jk, ErrRequired, "is set, but names no keys: set jwks_file, jwks_url or hmac_secret_env")
		}
		return
	}
	sources := 0
	for _, set := range []bool{j.JWKSFile != "", j.JWKSURL != "", j.HMACSecretEnv != ""} {
		if set {
			sources++
		}
	}
	if sources > 1 {
		p.add(jk, ErrConflict, "set one of jwks_file, jwks_url and hmac_secret_env")
	}
	if j.Header != "" && j.Cookie != "" {
		p.add(jk+".cookie", ErrConflict, "the token comes from header %q or from a cookie, not both", j.Header)
	}
	if j.Header != "" {
		checkHeader(p, jk+".header", j.Header)
	}
	if j.Cookie != "" && !httpguts.ValidHeaderFieldName(j.Cookie) {
		p.add(jk+".cookie", ErrInvalid, "%q is not a valid cookie name", j.Cookie)
	}
	if len(j.Claims) == 0 {
		p.add(jk+".claims", ErrRequired, "name at least one claim, like [\"iss\", \"sub\"]")
	}
	for i, cl := range j.Claims {
		if cl == "" {
			p.add(fmt.Sprintf("%s.claims[%d]", jk, i), ErrRequired, "must not be empty")
		}
	}
	if j.JWKSURL != "" {
		if err := checkHTTPURL(j.JWKSURL, false); err != nil {
			p.add(jk+".jwks_url", ErrInvalid, "%q: %v", j.JWKSURL, err)
		}
	}
	if j.HMACSecretEnv != "" && !validEnvName(j.HMACSecretEnv) {
		p.add(jk+".hmac_secret_env", ErrInvalid, "%q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", j.HMACSecretEnv)
	}
	if len(j.Algorithms) == 0 {
		p.add(jk+".algorithms", ErrRequired, "name at least one algorithm, like [\"RS256\"]")
	}
	hmac := 0
	for i, a := range j.Algorithms {
		key := fmt.Sprintf("%s.algorithms[%d]", jk, i)
		switch {
		case strings.EqualFold(a, "none"):
			p.add(key, ErrInvalid, "\"none\" would accept unsigned tokens; it is never allowed")
		case !slices.Contains(identity.Algorithms, a):
			p.add(key, ErrInvalid, "%q: want one of %s", a, strings.Join(identity.Algorithms, ", "))
		case identity.IsHMAC(a):
			hmac++
		}
	}
	switch {
	case j.HMACSecretEnv != "" && hmac == 0:
		p.add(jk+".hmac_secret_env", ErrConflict, "needs HS256, HS384 or HS512 in algorithms (now %v)", j.Algorithms)
	case j.HMACSecretEnv != "" && hmac < len(j.Algorithms):
		p.add(jk+".algorithms", ErrConflict, "with hmac_secret_env only HS256, HS384 and HS512 can verify; remove the others")
	case j.HMACSecretEnv == "" && hmac > 0:
		p.add(jk+".algorithms", ErrConflict, "HS* algorithms need hmac_secret_env; a JWK Set's keys are never HMAC secrets")
	}
	if j.Leeway < 0 {
		p.add(jk+".leeway", ErrRange, "must be >= 0; got %s", j.Leeway)
	}
	for i, s := range j.Issuers {
		if s == "" {
			p.add(fmt.Sprintf("%s.issuers[%d]", jk, i), ErrRequired, "must not be empty")
		}
	}
	for i, s := range j.Audiences {
		if s == "" {
			p.add(fmt.Sprintf("%s.audiences[%d]", jk, i), ErrRequired, "must not be empty")
		}
	}
}

// ExplainIdentity returns, one line each, what scopes a client's keys under
// this configuration and what that costs: the text `idemgate validate`
// prints so that an operator sees the choice (DESIGN.md, "Identity").
func (id *Idempotency) ExplainIdentity() []string {
	src := id.IdentitySources()
	var lines []string
	var parts []string
	if len(src.Headers) > 0 {
		parts = append(parts, "the exact values of header(s) "+strings.Join(src.Headers, ", "))
	}
	if len(src.Cookies) > 0 {
		parts = append(parts, "the values of cookie(s) "+strings.Join(src.Cookies, ", "))
	}
	if j := src.JWT; j.Enabled() {
		from := "header " + j.TokenHeader()
		if j.Cookie != "" {
			from = "cookie " + j.Cookie
		}
		parts = append(parts, fmt.Sprintf("the verified claims %s of the JWT in %s", strings.Join(j.Claims, ", "), from))
	}
	switch {
	case len(parts) == 0:
		lines = append(lines, "identity: none configured: every client shares one scope per tenant, and a key alone decides whose answer is replayed.")
	case id.IdentityHeaders == nil && !id.Identity.configured():
		lines = append(lines, "identity: "+parts[0]+" (the default: no identity source is configured).")
	default:
		lines = append(lines, "identity: "+strings.Join(parts, "; ")+", hashed.")
	}
	if len(src.Headers) > 0 && slices.Contains(src.Headers, "Authorization") && !src.JWT.Enabled() {
		lines = append(lines, "identity: a raw Authorization value changes when a token is refreshed, and the retry then runs again; with JWT bearer tokens, use idempotency.identity.jwt so that the same user's refreshed token replays.")
	}
	lines = append(lines, "identity: clients that authenticate with a session cookie or an API-key header need it named in idempotency.identity.cookies or headers; otherwise they send no identity.")
	if id.RequireIdentity {
		lines = append(lines, "require_identity: true: a keyed write without an identity gets 400 idempotency_identity_missing and nothing runs.")
	} else {
		lines = append(lines, "require_identity: false: a keyed write without an identity is scoped by tenant and key alone, so a client that guesses another's key (order-123) gets that client's answer and its own write never runs; keep it false only for anonymous APIs.")
	}
	return lines
}

// safeMethods are the methods that must never be idempotent routes: they do
// not write, and their requests must never be claimed or replayed.
var safeMethods = map[string]bool{"GET": true, "HEAD": true, "OPTIONS": true, "TRACE": true}

// validateExtraMethods checks extra_methods: upper-case tokens (routes'
// methods must be), each listed once, none already registered.
// A method is an RFC 9110 token, the syntax of a header name, which is what
// httpguts.ValidHeaderFieldName checks.
func (c *Config) validateExtraMethods(p *problems) {
	for i, m := range c.ExtraMethods {
		key := fmt.Sprintf("extra_methods[%d]", i)
		switch {
		case !httpguts.ValidHeaderFieldName(m) || strings.ToUpper(m) != m:
			p.add(key, ErrInvalid, "%q: want an upper-case method token (RFC 9110), like \"PURGE\"", m)
		case slices.Contains(RegisteredMethods, m):
			p.add(key, ErrInvalid, "%q is a registered method, which routes may name without it", m)
		case slices.Index(c.ExtraMethods, m) < i:
			p.add(key, ErrDuplicate, "%q is listed twice", m)
		}
	}
}

func (c *Config) validateRoutes(p *problems) {
	names := make(map[string]int, len(c.Routes))
	tmpls := make([]*pathtmpl.Template, len(c.Routes))
	for i := range c.Routes {
		r := &c.Routes[i]
		key := fmt.Sprintf("routes[%d]", i)
		switch {
		case r.Name == "":
			p.add(key+".name", ErrRequired, "is required")
		case !validRouteName(r.Name):
			p.add(key+".name", ErrInvalid, "%q: use letters, digits, \"_\", \"-\" and \".\"", r.Name)
		}
		if j, ok := names[r.Name]; ok && r.Name != "" {
			p.add(key+".name", ErrDuplicate, "%q is also the name of routes[%d]", r.Name, j)
		} else {
			names[r.Name] = i
		}
		switch {
		case r.Method == "":
			p.add(key+".method", ErrRequired, "is required, like \"POST\"")
		case !httpguts.ValidHeaderFieldName(r.Method) || strings.ToUpper(r.Method) != r.Method:
			p.add(key+".method", ErrInvalid, "%q: want an upper-case method token, like \"POST\"", r.Method)
		case !slices.Contains(RegisteredMethods, r.Method) && !slices.Contains(c.ExtraMethods, r.Method):
			msg := "%q is not a registered HTTP method, so the route would never match and its requests would pass unprotected"
			if n := nearestKey(r.Method, RegisteredMethods); n != "" {
				msg += "; did you mean " + n + "?"
			}
			p.add(key+".method", ErrInvalid, msg+" (list a method of your own in extra_methods)", r.Method)
		}
		if r.Path == "" {
			p.add(key+".path", ErrRequired, "is required, like \"/ucp/v1/carts/{id}\"")
		} else if t, err := pathtmpl.Parse(r.Path); err != nil {
			p.add(key+".path", ErrInvalid, "%v", err)
		} else {
			tmpls[i] = t
		}
		if r.Idempotent && safeMethods[r.Method] {
			p.add(key+".idempotent", ErrConflict, "is true on %s, a safe method; only writes are idempotent routes", r.Method)
		}
		if r.RequireKey && !r.Idempotent {
			p.add(key+".require_key", ErrConflict, "is true, but the route is not idempotent")
		}
		if len(r.FingerprintIgnore) > 0 && !r.Idempotent {
			p.add(key+".fingerprint_ignore", ErrConflict, "is set, but the route is not idempotent")
		}
		for j, ptr := range r.FingerprintIgnore {
			if err := checkJSONPointer(ptr); err != nil {
				p.add(fmt.Sprintf("%s.fingerprint_ignore[%d]", key, j), ErrInvalid, "%q is not an RFC 6901 JSON pointer: %v", ptr, err)
			}
		}
		switch {
		case r.Timeout < 0:
			p.add(key+".timeout", ErrRange, "must be >= 0 (0 means upstream.timeout); got %s", r.Timeout)
		case !r.Idempotent || c.Idempotency.MaxLease <= 0:
		case r.Timeout > c.Idempotency.MaxLease:
			p.add(key+".timeout", ErrRange, "%s exceeds %s: %s", fmtDur(r.Timeout),
				ref("idempotency.max_lease", c.Idempotency.MaxLease, defaults.Idempotency.MaxLease), leaseOutlived)
		case r.Timeout == 0 && c.Upstream.Timeout > c.Idempotency.MaxLease:
			p.add(key+".timeout", ErrRange, "is not set, so %s applies, which exceeds %s: %s",
				ref("upstream.timeout", c.Upstream.Timeout, defaults.Upstream.Timeout),
				ref("idempotency.max_lease", c.Idempotency.MaxLease, defaults.Idempotency.MaxLease), leaseOutlived)
		}
		c.validateLateWait(p, key, r)
		if r.Protocol != "" && r.Protocol != ProtocolGraphQL {
			p.add(key+".protocol", ErrInvalid, "%q: want \"\" or %q", r.Protocol, ProtocolGraphQL)
		}
		checkMode(p, key+".mode", r.Mode, true)
		c.validateRoutePolicy(p, key, r)
		if r.Reconcile != nil {
			c.validateReconcile(p, key, r, tmpls[i])
		}
		if s := r.Session; s != nil {
			skey := key + ".session"
			switch {
			case s.Param != "" && s.Header != "":
				p.add(skey, ErrConflict, "set either a path parameter or a header, not both")
			case s.Param == "" && s.Header == "":
				p.add(skey, ErrRequired, "name a path parameter (session: id) or a header (session: {header: X-Cart-Id})")
			case s.Param != "":
				if tmpls[i] != nil && !tmpls[i].HasParam(s.Param) {
					p.add(skey, ErrInvalid, "names parameter %q, but path %q has no {%s}", s.Param, r.Path, s.Param)
				}
			default:
				checkHeader(p, skey+".header", s.Header)
			}
		}
		if rl := r.RateLimit; rl != nil {
			rkey := key + ".rate_limit"
			if rl.Requests <= 0 {
				p.add(rkey+".requests", ErrRange, "must be > 0; got %d", rl.Requests)
			}
			if rl.Per <= 0 {
				p.add(rkey+".per", ErrRange, "must be > 0; got %s", rl.Per)
			}
			if c.Limiter.Backend == LimiterRedis {
				// The Redis scripts count in microseconds.
				for _, f := range []struct {
					name string
					d    time.Duration
				}{{"per", rl.Per}, {"block", rl.Block}} {
					if f.d%time.Microsecond != 0 {
						p.add(rkey+"."+f.name, ErrRange, "%v is not a whole number of microseconds, which limiter.backend redis needs", f.d)
					}
				}
			}
			switch rl.Algorithm {
			case "", AlgorithmTokenBucket:
				if rl.Block != 0 {
					p.add(rkey+".block", ErrConflict, "is set, but only algorithm %q blocks", AlgorithmWindow)
				}
			case AlgorithmWindow:
				if rl.Block < 0 {
					p.add(rkey+".block", ErrRange, "must be >= 0 (0 means per); got %s", rl.Block)
				}
			default:
				p.add(rkey+".algorithm", ErrInvalid, "%q: want %q or %q", rl.Algorithm, AlgorithmTokenBucket, AlgorithmWindow)
			}
			if by, err := identity.ParseBy(rl.By); err != nil {
				p.add(rkey+".by", ErrInvalid, "%v", err)
			} else if by.IsIdentity() && !c.Idempotency.IdentitySources().JWT.Enabled() {
				p.add(rkey+".by", ErrConflict, "is identity, which counts verified JWT identities only, but idempotency.identity.jwt is not set: every request would count per address; use client_ip, or header:NAME for a header a trusted proxy sets")
			}
		}
	}
	pc, _ := pathtmpl.ParseCase(c.PathCase) // an invalid path_case is reported above
	for j := range c.Routes {
		for i := range j {
			a, b := &c.Routes[i], &c.Routes[j]
			if a.Method != b.Method || tmpls[i] == nil || tmpls[j] == nil {
				continue
			}
			example, ok := pathtmpl.AmbiguousNormalized(tmpls[i], tmpls[j], pc)
			if !ok {
				continue
			}
			p.add(fmt.Sprintf("routes[%d].path", j), ErrAmbiguous,
				"route %q (%s %s) and routes[%d] %q (%s %s) both match %s %s equally (literal segments: %d each; paths are normalized, path_case %s); make one more specific",
				b.Name, b.Method, b.Path, i, a.Name, a.Method, a.Path, b.Method, example, tmpls[j].Literals(), pc)
		}
	}
}

// checkUnknownOutcome checks an unknown_outcome value; "" inherits on a
// route.
func checkUnknownOutcome(p *problems, key, v string, inherit bool) {
	if v == modes.UnknownTakeover || v == modes.UnknownHold || (inherit && v == "") {
		return
	}
	p.add(key+".unknown_outcome", ErrInvalid, "%q: want %q or %q", v, modes.UnknownTakeover, modes.UnknownHold)
}

// validateLateWait checks a route's late_answer_wait, and that its timeout
// plus its late wait (its own, else idempotency.late_answer_wait) ends
// within max_lease (DESIGN.md, "Unknown outcomes"): a kept call's claim is
// renewed only up to max_lease.
func (c *Config) validateLateWait(p *problems, key string, r *Route) {
	wait, waitKey := c.Idempotency.LateAnswerWait, ref("idempotency.late_answer_wait", c.Idempotency.LateAnswerWait, defaults.Idempotency.LateAnswerWait)
	if r.LateAnswerWait != nil {
		wait, waitKey = *r.LateAnswerWait, key+".late_answer_wait ("+fmtDur(*r.LateAnswerWait)+")"
		switch {
		case wait < 0:
			p.add(key+".late_answer_wait", ErrRange, "must be >= 0 (0 cancels a write at its timeout); got %s", wait)
			return
		case !r.Idempotent:
			p.add(key+".late_answer_wait", ErrConflict, "is set, but the route is not idempotent")
			return
		}
	}
	maxLease := c.Idempotency.MaxLease
	timeout, timeoutKey := r.Timeout, key+".timeout ("+fmtDur(r.Timeout)+")"
	if r.Timeout == 0 {
		timeout, timeoutKey = c.Upstream.Timeout, ref("upstream.timeout", c.Upstream.Timeout, defaults.Upstream.Timeout)
	}
	if !r.Idempotent || wait <= 0 || maxLease <= 0 || timeout < 0 || timeout > maxLease || timeout+wait <= maxLease {
		return // a timeout over max_lease alone is reported as such
	}
	limit := ref("idempotency.max_lease", maxLease, defaults.Idempotency.MaxLease)
	if r.LateAnswerWait == nil {
		p.add(key+".late_answer_wait", ErrRange, "is not set, so %s applies; %s plus it exceeds %s: %s", waitKey, timeoutKey, limit, lateOutlived)
		return
	}
	p.add(key+".late_answer_wait", ErrRange, "%s plus %s exceeds %s: %s", waitKey, timeoutKey, limit, lateOutlived)
}

// validateReconcile checks a route's reconcile probe (DESIGN.md, Unknown
// outcomes, 3). tmpl is the route's parsed path, nil when it is invalid.
func (c *Config) validateReconcile(p *problems, key string, r *Route, tmpl *pathtmpl.Template) {
	rc, key := r.Reconcile, key+".reconcile"
	switch {
	case !r.Idempotent:
		p.add(key, ErrConflict, "is set, but the route is not idempotent")
		return
	case r.Protocol == ProtocolGraphQL:
		p.add(key, ErrConflict, "is refused on protocol: graphql routes (a GraphQL lookup is a query in a body, not a path); keep unknown_outcome: hold and resolve unknown records through the admin API")
		return
	}
	if cmp.Or(r.UnknownOutcome, c.Idempotency.UnknownOutcome) != modes.UnknownHold {
		p.add(key, ErrConflict, "is set, but the route's unknown_outcome is not hold: none of its records becomes unknown, so there is nothing to probe; set unknown_outcome: hold")
	}
	if c.Idempotency.EncryptionKeyEnv == "" {
		p.add(key, ErrRequired, "needs idempotency.encryption_key_env: the probe carries the original's identity headers and cookies, which the record keeps sealed until it resolves")
	}
	switch rc.Method {
	case "", "GET", "HEAD":
	default:
		p.add(key+".method", ErrInvalid, "%q: want GET or HEAD (a probe must never write)", rc.Method)
	}
	if rc.Path == "" {
		p.add(key+".path", ErrRequired, "is required, like \"/orders/by-ref/{key}\"")
	} else if t, err := pathtmpl.Parse(rc.Path); err != nil {
		p.add(key+".path", ErrInvalid, "%v", err)
	} else {
		for _, name := range t.Params() {
			switch {
			case name == ReconcileKey:
			case tmpl == nil:
			case !tmpl.HasParam(name):
				p.add(key+".path", ErrInvalid, "{%s} is neither {%s} (the idempotency key) nor a parameter of path %q", name, ReconcileKey, r.Path)
			}
		}
		if tmpl != nil && tmpl.HasParam(ReconcileKey) && t.HasParam(ReconcileKey) {
			p.add(key+".path", ErrConflict, "{%s} is the idempotency key, but path %q has a parameter {%s} too; rename the route's parameter", ReconcileKey, r.Path, ReconcileKey)
		}
	}
	seen := map[int]string{}
	for _, l := range []struct {
		name string
		v    []int
	}{{"found", rc.Found}, {"absent", rc.Absent}} {
		for j, st := range l.v {
			sk := fmt.Sprintf("%s.%s[%d]", key, l.name, j)
			switch {
			case st < 200 || st > 599:
				p.add(sk, ErrRange, "%d: want a final HTTP status from 200 to 599", st)
			case st == 401 || st == 403:
				p.add(sk, ErrInvalid, "%d means the probe's credentials were refused, which says nothing about the write; it always leaves the record unknown", st)
			case seen[st] != "":
				p.add(sk, ErrDuplicate, "%d is listed in %s already", st, seen[st])
			default:
				seen[st] = l.name
			}
		}
	}
	if rc.Status != 0 && (rc.Status < 200 || rc.Status > 599 || rc.Status == 304) {
		p.add(key+".status", ErrRange, "%d: want a status from 200 to 599 that can be replayed (not 304), or 0 to keep the probe's", rc.Status)
	}
	if rc.Every != 0 && rc.Every < MinReconcileEvery {
		p.add(key+".every", ErrRange, "%s: want at least %s (0 means %s)", rc.Every, fmtDur(MinReconcileEvery), fmtDur(DefaultReconcileEvery))
	}
}

// ReconcileKey is the placeholder of a reconcile path that the
// idempotency key fills.
const ReconcileKey = "key"

// lateOutlived says why a kept call must end within max_lease.
const lateOutlived = "a kept call's claim stops being renewed while its late answer may still come, and a retry could take the key over and run the write twice; lower the timeout or late_answer_wait, or raise max_lease"

// leaseOutlived says why a keyed write must end within max_lease.
const leaseOutlived = "the claim stops being renewed while the write still runs, and a retry could take the key over and run the write twice; lower the timeout or raise max_lease"

// minLease is the shortest idempotency.lease.
const minLease = time.Second

// leasePerRedisTimeout is how many store.redis.timeout a lease should be
// at least: a renewal starts lease/3 after the last one and can take four
// timeouts (pool wait, dial, write, read) to land, which must be before the
// lease ends: lease/3 + 4 × timeout <= lease.
const leasePerRedisTimeout = 6

// Warnings returns the settings of c that are valid but risky, such as a
// lease that a slow Redis could let lapse while its request runs. Like
// Validate, it has no side effects. c should be valid.
func (c *Config) Warnings() []Warning {
	var w []Warning
	id := c.Idempotency
	if r := c.Store.Redis.Timeout; c.Store.Backend == StoreRedis && r > 0 && id.Lease > 0 && id.Lease < leasePerRedisTimeout*r {
		w = append(w, Warning{Name: "idempotency.lease", Msg: fmt.Sprintf(
			"%s is shorter than %d × %s = %s: a renewal starts lease/3 after the last one, and one that waits for a connection, dials, writes and reads, each up to the timeout, lands after the lease ended if Redis is that slow; a retry could then take over a request that still runs",
			own(id.Lease, defaults.Idempotency.Lease), leasePerRedisTimeout, ref("store.redis.timeout", r, defaults.Store.Redis.Timeout), fmtDur(leasePerRedisTimeout*r))})
	}
	// A limit by a header counts per value, and any client chooses its own
	// values: a random one per request buys a fresh budget each time. It
	// is meant for a header a proxy in front sets (DESIGN.md, Hardening);
	// without client_ip.trusted_proxies no proxy is in front. The rule is
	// that simple on purpose: idemgate cannot see whether the proxy
	// overwrites the header, only whether there is one.
	if len(c.ClientIP.TrustedProxies) == 0 {
		for i := range c.Routes {
			rl := c.Routes[i].RateLimit
			if rl == nil {
				continue
			}
			if by, err := identity.ParseBy(rl.By); err == nil && by.Header() != "" {
				w = append(w, Warning{Name: fmt.Sprintf("routes[%d].rate_limit.by", i), Msg: fmt.Sprintf(
					"%q counts per value of a header any client can set, so a client that sends a new value each time is never limited; client_ip.trusted_proxies is empty, so no proxy in front sets it. Use by: identity with idempotency.identity.jwt (verified claims), or list the proxy that overwrites %s in client_ip.trusted_proxies",
					rl.By, by.Header())})
			}
		}
	}
	return w
}

// defaults are the values of [Default], which messages name as such.
var defaults = Default()

// own formats a key's own value, saying when it is the default:
// "60m" or "60m (the default)".
func own[T time.Duration | int64 | int](v, def T) string {
	if v == def {
		return fmtValue(v) + " (the default)"
	}
	return fmtValue(v)
}

// ref names another key with its value, saying when it is the default:
// "idempotency.max_lease (60m, the default)".
func ref[T time.Duration | int64 | int](key string, v, def T) string {
	if v == def {
		return key + " (" + fmtValue(v) + ", the default)"
	}
	return key + " (" + fmtValue(v) + ")"
}

func fmtValue[T time.Duration | int64 | int](v T) string {
	if d, ok := any(v).(time.Duration); ok {
		return fmtDur(d)
	}
	return strconv.FormatInt(int64(v), 10)
}

// fmtDur formats d without zero trailing units: "1h", "1h30m", "90ms".
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// validateRoutePolicy checks a route's own policy keys: in_progress,
// wait_timeout, retention, release_statuses, drop_headers and errors.
func (c *Config) validateRoutePolicy(p *problems, key string, r *Route) {
	checkInProgress(p, key, r.InProgress, true)
	checkUnknownOutcome(p, key, r.UnknownOutcome, true)
	if r.WaitTimeout < 0 {
		p.add(key+".wait_timeout", ErrRange, "must be >= 0 (0 means idempotency.wait_timeout); got %s", r.WaitTimeout)
	}
	if r.Retention < 0 {
		p.add(key+".retention", ErrRange, "must be >= 0 (0 means idempotency.retention); got %s", r.Retention)
	} else if r.Retention > 0 && r.Retention < c.Idempotency.MaxLease {
		p.add(key+".retention", ErrRange, "%s is less than idempotency.max_lease %s: a record must outlive its longest lease", r.Retention, c.Idempotency.MaxLease)
	}
	for i, s := range r.ReleaseStatuses {
		if s < 100 || s > 599 {
			p.add(fmt.Sprintf("%s.release_statuses[%d]", key, i), ErrRange, "%d: want an HTTP status from 100 to 599 (ranges like \"4xx\" are not accepted: list the statuses)", s)
		}
	}
	for i, h := range r.DropHeaders {
		checkHeader(p, fmt.Sprintf("%s.drop_headers[%d]", key, i), h)
	}
	if !r.Idempotent {
		for _, f := range []struct {
			name string
			set  bool
		}{{"in_progress", r.InProgress != ""}, {"wait_timeout", r.WaitTimeout != 0}, {"retention", r.Retention != 0},
			{"unknown_outcome", r.UnknownOutcome != ""},
			{"release_statuses", r.ReleaseStatuses != nil}, {"drop_headers", r.DropHeaders != nil}} {
			if f.set {
				p.add(key+"."+f.name, ErrConflict, "is set, but the route is not idempotent")
			}
		}
	}
	if r.Errors != nil {
		if r.Errors.Extensions != "" && r.Protocol != ProtocolGraphQL {
			p.add(key+".errors.extensions", ErrConflict, "is set, but the route is not protocol: graphql")
		}
		checkErrors(p, key+".errors", c.Errors.spec().Merge(r.Errors.spec()), *r.Errors)
	}
}

// spec is e as internal/problem takes it.
func (e Errors) spec() problem.Spec {
	return problem.Spec{Codes: e.Codes, ContentType: e.ContentType, Body: e.Body, Extensions: e.Extensions}
}

// Spec returns e as the proxy takes it.
func (e Errors) Spec() problem.Spec { return e.spec() }

// checkErrors compiles merged (an errors section over its parent) the way
// the proxy will, and checks own's code renames.
func checkErrors(p *problems, key string, merged problem.Spec, own Errors) {
	for _, from := range slices.Sorted(maps.Keys(own.Codes)) {
		if !slices.Contains(problem.Codes, from) {
			p.add(key+".codes["+from+"]", ErrInvalid, "%q is not a code of the error table (%s)", from, strings.Join(problem.Codes, ", "))
		}
	}
	if _, err := problem.Compile(merged); err != nil {
		field, msg, ok := strings.Cut(err.Error(), ": ")
		if !ok {
			field, msg = "", err.Error()
		}
		k := key
		if field != "" && !strings.Contains(field, " ") {
			k = key + "." + field
		} else {
			msg = err.Error()
		}
		p.add(k, ErrInvalid, "%s", msg)
	}
}

func checkInProgress(p *problems, key, v string, inherit bool) {
	if v == modes.InProgressReject || v == modes.InProgressWait || (inherit && v == "") {
		return
	}
	p.add(key+".in_progress", ErrInvalid, "%q: want %q or %q", v, modes.InProgressReject, modes.InProgressWait)
}

func checkMode(p *problems, key, mode string, inherit bool) {
	if mode == ModeEnforce || mode == ModeObserve || inherit && mode == "" {
		return
	}
	p.add(key, ErrInvalid, "%q: want %q or %q", mode, ModeEnforce, ModeObserve)
}

func checkHeader(p *problems, key, name string) {
	if !httpguts.ValidHeaderFieldName(name) {
		p.add(key, ErrInvalid, "%q is not a valid header name", name)
	}
}

func checkListen(p *problems, key, addr string) {
	if _, _, err := splitHostPort(addr); err != nil {
		p.add(key, ErrInvalid, "%q: want host:port, like \":8080\": %v", addr, err)
	}
}

// splitHostPort splits a host:port address whose port is a number.
func splitHostPort(addr string) (host string, port int, err error) {
	host, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("port %q is not a number from 0 to 65535", ps)
	}
	if host != "" && !validHost(strings.ToLower(host)) {
		return "", 0, fmt.Errorf("%q is not a host name or IP address", host)
	}
	return host, int(n), nil
}

// sameListener reports whether two listen addresses would collide.
func sameListener(a, b string) bool {
	ha, pa, errA := splitHostPort(a)
	hb, pb, errB := splitHostPort(b)
	if errA != nil || errB != nil || pa == 0 || pa != pb {
		return false
	}
	return ha == hb || isWildcardHost(ha) || isWildcardHost(hb)
}

func isWildcardHost(h string) bool {
	if h == "" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsUnspecified()
}

// checkHTTPURL checks an absolute http(s) URL; httpsOnly refuses http.
func checkHTTPURL(s string, httpsOnly bool) error {
	u, err := url.Parse(s)
	switch {
	case err != nil && httpsOnly:
		return errors.New("want an absolute https URL")
	case err != nil:
		return errors.New("want an absolute http or https URL")
	case u.Scheme == "https", u.Scheme == "http" && !httpsOnly:
	case httpsOnly:
		return errors.New("want an absolute https URL")
	default:
		return errors.New("want an absolute http or https URL")
	}
	if u.Host == "" {
		return errors.New("missing host")
	}
	if u.Fragment != "" || strings.Contains(s, "#") {
		return errors.New("a fragment is not allowed")
	}
	return nil
}

// validHost reports whether h is a lower-case DNS name (labels of letters,
// digits, "-" and "_") or an IP address without brackets or zone.
func validHost(h string) bool {
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Zone() == ""
	}
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func validRouteName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return s != ""
}

func validEnvName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return s != ""
}

// checkJSONPointer checks an RFC 6901 pointer naming a member, not the whole
// document: "/" then reference tokens separated by "/", with "~" only in
// the escapes "~0" and "~1".
func checkJSONPointer(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("not UTF-8")
	}
	if !strings.HasPrefix(s, "/") {
		return errors.New("must start with \"/\", like \"/meta/sent_at\"")
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '~' && (i+1 == len(s) || s[i+1] != '0' && s[i+1] != '1') {
			return errors.New("\"~\" must be followed by 0 or 1")
		}
	}
	return nil
}
