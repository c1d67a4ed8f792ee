package config

import (
	"reflect"
	"slices"
	"time"

	"github.com/idemgate/idemgate/internal/modes"
)

// Config is idemgate's whole configuration. Obtain one from [Default],
// [Load] or [Parse], then check it with [Config.Validate]. A Config is plain
// data: it is safe for concurrent reads, and nothing in this package keeps a
// reference to it.
type Config struct {
	// Listen is the public listener's address, host:port. Default ":8080".
	Listen string `mapstructure:"listen"`
	// AdminListen is the admin listener's address (/healthz, /readyz,
	// /metrics, /admin/...), host:port. Default ":9090".
	AdminListen string `mapstructure:"admin_listen"`
	// AdminHost is the host name (no port) the operator console at /ui/
	// answers to besides loopback (localhost, 127.0.0.1, [::1]): the name
	// an Ingress or a Service gives the admin listener. "" (the default):
	// loopback only, as through kubectl port-forward. Requests with any
	// other Host are refused (DNS rebinding).
	AdminHost string `mapstructure:"admin_host"`
	// MaxBufferedBytes caps the request bodies held in memory at once, in
	// bytes; over it a keyed request gets 503 overloaded. Default 256 MiB.
	MaxBufferedBytes int64 `mapstructure:"max_buffered_bytes"`
	// MaxBufferedBytesPerClient caps the bytes of MaxBufferedBytes that one
	// client address (an IPv4 address or IPv6 /64, after trusted_proxies)
	// may hold; over it that client's keyed request gets 503 overloaded.
	// 0 means a quarter of MaxBufferedBytes (the default).
	MaxBufferedBytesPerClient int64 `mapstructure:"max_buffered_bytes_per_client"`
	// MaxHeaderBytes caps a request's head (request line and headers);
	// over it the server answers 431. Default 64 KiB; at most
	// MaxHeaderBytesCeiling.
	MaxHeaderBytes int `mapstructure:"max_header_bytes"`
	// MaxConnections caps the open connections of each listener (the public
	// one, plain or TLS; the admin one; tls.http_listen), each on its own:
	// at the cap a listener stops accepting until a connection closes, and
	// new clients wait in the kernel's accept queue. Default 10000.
	MaxConnections int `mapstructure:"max_connections"`
	// RequestBodyTimeout is how long after its headers a keyed request's
	// body may take to arrive; over it the request gets 408
	// request_timeout and nothing is claimed. Default 30s.
	RequestBodyTimeout time.Duration `mapstructure:"request_body_timeout"`
	// Profile presets the defaults a family of clients expects
	// (ProfileDefault, ProfileStripe or ProfileIETF; DESIGN.md, Profiles):
	// whole values, each replaced entirely by a key set explicitly. No
	// profile changes require_identity, the scope or what the fingerprint
	// covers. Default ProfileDefault.
	Profile string `mapstructure:"profile"`
	// RequestIDHeader names the header idemgate reads a request ID from,
	// forwards upstream and answers with (DESIGN.md, Profiles). Default
	// "X-Request-Id".
	RequestIDHeader string `mapstructure:"request_id_header"`

	// Upstream is the protected API.
	Upstream Upstream `mapstructure:"upstream"`
	// TLS configures the public listener's TLS.
	TLS TLS `mapstructure:"tls"`
	// Store holds idempotency records.
	Store Store `mapstructure:"store"`
	// ClientIP says how the client address is found.
	ClientIP ClientIP `mapstructure:"client_ip"`
	// EdgeLimit limits every request per client address.
	EdgeLimit EdgeLimit `mapstructure:"edge_limit"`
	// Limiter selects where limiter state lives.
	Limiter Limiter `mapstructure:"limiter"`
	// Idempotency configures keyed writes.
	Idempotency Idempotency `mapstructure:"idempotency"`
	// Sessions configures per-session turns.
	Sessions Sessions `mapstructure:"sessions"`
	// Tracing exports OpenTelemetry spans (DESIGN.md, Tracing).
	Tracing Tracing `mapstructure:"tracing"`

	// Mode is ModeEnforce or ModeObserve; a route's Mode overrides it.
	// Default ModeEnforce.
	Mode string `mapstructure:"mode"`
	// PathCase is how routes' literal path segments compare with a
	// request's: PathCaseInsensitive (/UCP/v1 matches /ucp/v1) or
	// PathCaseSensitive, for upstreams that route by case. Parameter values
	// keep their case either way. Default PathCaseInsensitive.
	PathCase string `mapstructure:"path_case"`
	// ExtraMethods are request methods that routes may name besides those
	// of IANA's HTTP Method Registry ([RegisteredMethods]): each an
	// upper-case RFC 9110 token, such as "PURGE" or "QUERY". A route's
	// method in neither is refused, since a misspelt method (POTS) would
	// never match and its writes would pass unprotected. Default none.
	ExtraMethods []string `mapstructure:"extra_methods"`
	// Routes are the matched routes; requests matching none pass through.
	Routes []Route `mapstructure:"routes"`
	// Errors shapes idemgate's own answers like the fronted API's
	// (DESIGN.md, "Error shapes"); a route's errors are merged over it.
	// Default: problem+json with idemgate's codes.
	Errors Errors `mapstructure:"errors"`
}

// RegisteredMethods are the methods of IANA's HTTP Method Registry
// (https://www.iana.org/assignments/http-methods, established by RFC 9110
// §16.1), which a route's method may name without [Config.ExtraMethods].
// "*" is reserved there and is no method.
var RegisteredMethods = []string{
	"ACL", "BASELINE-CONTROL", "BIND", "CHECKIN", "CHECKOUT", "CONNECT", "COPY",
	"DELETE", "GET", "HEAD", "LABEL", "LINK", "LOCK", "MERGE", "MKACTIVITY",
	"MKCALENDAR", "MKCOL", "MKREDIRECTREF", "MKWORKSPACE", "MOVE", "OPTIONS",
	"ORDERPATCH", "PATCH", "POST", "PRI", "PROPFIND", "PROPPATCH", "PUT",
	"REBIND", "REPORT", "SEARCH", "TRACE", "UNBIND", "UNCHECKOUT", "UNLINK",
	"UNLOCK", "UPDATE", "UPDATEREDIRECTREF", "VERSION-CONTROL",
}

// Values of [Config.PathCase].
const (
	PathCaseInsensitive = "insensitive"
	PathCaseSensitive   = "sensitive"
)

// Modes for [Config.Mode] and [Route.Mode].
const (
	ModeEnforce = "enforce"
	ModeObserve = "observe"
)

// Upstream describes the API idemgate protects.
type Upstream struct {
	// URL is the upstream's absolute http or https URL. Required.
	URL string `mapstructure:"url"`
	// Timeout bounds a keyed write's whole answer and a pass-through
	// request's wait for response headers. A route's Timeout overrides it.
	// Default 60s.
	Timeout time.Duration `mapstructure:"timeout"`
	// Host is HostPreserve (forward the client's Host) or HostUpstream (use
	// the upstream URL's host). Default HostPreserve.
	Host string `mapstructure:"host"`
}

// Values of [Upstream.Host].
const (
	HostPreserve = "preserve"
	HostUpstream = "upstream"
)

// TLS configures the public listener's TLS.
type TLS struct {
	// Mode is TLSNone (plain HTTP), TLSFiles (CertFile and KeyFile, reloaded
	// on change) or TLSACME (certificates from an ACME CA). Default TLSNone.
	Mode string `mapstructure:"mode"`
	// CertFile and KeyFile are PEM files; both are required with TLSFiles.
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
	// Domains are the host names to obtain certificates for with TLSACME.
	Domains []string `mapstructure:"domains"`
	// Email is the ACME account's contact address; optional.
	Email string `mapstructure:"email"`
	// CA is the ACME directory URL (https); empty means certmagic's default
	// (Let's Encrypt production).
	CA string `mapstructure:"ca"`
	// CARoot is a PEM file of root certificates to trust for CA; optional.
	CARoot string `mapstructure:"ca_root"`
	// OnDemand enables on-demand certificates for allowed names.
	OnDemand OnDemand `mapstructure:"on_demand"`
	// StorageDir is the directory where TLSACME keeps certificates, keys
	// and the ACME account (certmagic's file storage) when store.backend is
	// StoreMemory; with StoreRedis they are kept in Redis, shared by the
	// replicas, and StorageDir must be empty. Empty means
	// $XDG_DATA_HOME/idemgate/certmagic, else
	// $HOME/.local/share/idemgate/certmagic, else
	// /var/lib/idemgate/certmagic.
	StorageDir string `mapstructure:"storage_dir"`
	// HTTPListen is the plain-HTTP listener's address, host:port: it
	// answers ACME HTTP-01 challenges and redirects every other request to
	// https (308). Empty means ":80" with TLSACME and no HTTP listener with
	// TLSFiles.
	HTTPListen string `mapstructure:"http_listen"`
}

// MaxHeaderBytesCeiling is the largest MaxHeaderBytes accepted.
const MaxHeaderBytesCeiling = 16 << 20

// DefaultACMEHTTPListen is the HTTP listener of TLSACME when
// [TLS.HTTPListen] is empty: ACME CAs validate HTTP-01 on port 80.
const DefaultACMEHTTPListen = ":80"

// EffectiveHTTPListen is the HTTP listener's address, or "" for none: see
// [TLS.HTTPListen].
func (t TLS) EffectiveHTTPListen() string {
	if t.HTTPListen == "" && t.Mode == TLSACME {
		return DefaultACMEHTTPListen
	}
	if t.Mode == TLSNone || t.Mode == "" {
		return ""
	}
	return t.HTTPListen
}

// Values of [TLS.Mode].
const (
	TLSNone  = "none"
	TLSFiles = "files"
	TLSACME  = "acme"
)

// OnDemand is the allow-list for on-demand ACME certificates. An empty list
// disables on-demand issuance.
type OnDemand struct {
	// Allow lists host names ("shop.example.com") and suffix patterns
	// ("*.example.com" or ".example.com", matching any name that ends in
	// ".example.com", but not "example.com" itself). There is no pattern
	// for "any name".
	Allow []string `mapstructure:"allow"`
}

// Store selects and configures the idempotency record store.
type Store struct {
	// Backend is StoreMemory (one process) or StoreRedis. Default StoreMemory.
	Backend string `mapstructure:"backend"`
	// Memory bounds the memory backend.
	Memory MemoryStore `mapstructure:"memory"`
	// Redis is the Redis connection, also used by limiter.backend redis.
	Redis Redis `mapstructure:"redis"`
	// Compression is CompressionNone or CompressionZstd: with zstd, stored
	// answers whose bodies have at least 512 bytes are compressed (before
	// sealing), on either backend. Compressed records are read whatever the
	// setting; releases before it read them as damaged (503), so enable it
	// once every replica runs a release that has it. Reloaded live. Default
	// CompressionNone.
	Compression string `mapstructure:"compression"`
}

// Values of [Store.Compression].
const (
	CompressionNone = "none"
	CompressionZstd = "zstd"
)

// Values of [Store.Backend].
const (
	StoreMemory = "memory"
	StoreRedis  = "redis"
)

// The values of store.redis.record_format.
const (
	// RecordCompact stores each record as one string: about a third less
	// work for Redis per keyed write than RecordHash.
	RecordCompact = "compact"
	// RecordHash stores records as the first release (0.1.0) did, which
	// its replicas read: for a rolling upgrade from it.
	RecordHash = "hash"
)

// MemoryStore bounds the in-memory store. When either bound is reached,
// claims fail with 503 idempotency_unavailable (fail closed).
type MemoryStore struct {
	// MaxEntries is the maximum number of records. Default 1,000,000.
	MaxEntries int `mapstructure:"max_entries"`
	// MaxBytes is the maximum total size of stored answers. Default 1 GiB.
	MaxBytes int64 `mapstructure:"max_bytes"`
}

// Redis configures the Redis connection, used by the store with
// store.backend redis and by the limiters with limiter.backend redis.
type Redis struct {
	// Addrs lists host:port addresses: one server, several cluster nodes, or
	// the sentinels when MasterName is set. Default ["127.0.0.1:6379"].
	Addrs []string `mapstructure:"addrs"`
	// MasterName, when set, selects Sentinel mode with this master.
	MasterName string `mapstructure:"master_name"`
	// Username and Password authenticate (Redis ACL); both optional. Set
	// the password with IDEMGATE_STORE_REDIS_PASSWORD rather than in the
	// file.
	Username string `mapstructure:"username"`
	Password string `mapstructure:"password"`
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// (Sentinel mode only: MasterName set), apart from Username and
	// Password, which authenticate to the master; both optional. Set the
	// password with IDEMGATE_STORE_REDIS_SENTINEL_PASSWORD rather than in
	// the file.
	SentinelUsername string `mapstructure:"sentinel_username"`
	SentinelPassword string `mapstructure:"sentinel_password"`
	// DB is the database number (standalone and sentinel only). Default 0.
	DB int `mapstructure:"db"`
	// KeyPrefix prefixes every key idemgate writes. Default "idemgate:".
	KeyPrefix string `mapstructure:"key_prefix"`
	// Timeout bounds dialing, each read and each write; there are no silent
	// retries beyond it. Default 500ms.
	Timeout time.Duration `mapstructure:"timeout"`
	// AutoPipeline sends the store calls that concurrent requests make
	// while Redis is busy with earlier ones together, as one pipeline
	// (keystore/redisstore's pipeliner); false sends each call on its own.
	// Default true.
	AutoPipeline bool `mapstructure:"auto_pipeline"`
	// RecordFormat is the layout records are written in, RecordCompact or
	// RecordHash; records in either are read. Reloaded live. Default
	// RecordCompact.
	RecordFormat string `mapstructure:"record_format"`
	// ReplayCache bounds each process's cache of completed answers in
	// front of the Redis store (keystore/replaycache); used with
	// store.backend redis only.
	ReplayCache ReplayCache `mapstructure:"replay_cache"`
}

// ReplayCache bounds the replay cache of the Redis store: a replay of an
// answer it holds needs no round trip to Redis.
type ReplayCache struct {
	// MaxEntries is the most answers held; 0 disables the cache. Default
	// 100,000.
	MaxEntries int `mapstructure:"max_entries"`
	// MaxBytes bounds the bytes of answers held (each answer's size plus
	// 256 B). Default 64 MiB.
	MaxBytes int64 `mapstructure:"max_bytes"`
}

// Enabled reports whether the replay cache is on (max_entries > 0).
func (r ReplayCache) Enabled() bool { return r.MaxEntries > 0 }

// ClientIP configures how the client address is found.
type ClientIP struct {
	// TrustedProxies lists CIDRs (a bare IP means a single address) whose
	// X-Forwarded-For is believed. Empty means the TCP peer is the client and
	// X-Forwarded-For is ignored. See [ClientIP.Prefixes].
	TrustedProxies []string `mapstructure:"trusted_proxies"`
}

// EdgeLimit is the per-client-address limit applied to every request.
type EdgeLimit struct {
	// Rate is the sustained rate in requests per second; 0 disables the
	// limit. Default 100.
	Rate float64 `mapstructure:"rate"`
	// Burst is the number of requests allowed beyond the rate, with nginx
	// burst=N nodelay semantics (an idle client may send Burst+1 at once).
	// Default 200.
	Burst int `mapstructure:"burst"`
}

// Limiter selects the limiters' state backend.
type Limiter struct {
	// Backend is LimiterLocal (per process) or LimiterRedis (shared by all
	// replicas). Default LimiterLocal.
	Backend string `mapstructure:"backend"`
	// MaxClients caps the client states each limiter tracks. Default 1,000,000.
	MaxClients int `mapstructure:"max_clients"`
	// IETFHeaders adds the IETF draft's RateLimit-Policy and RateLimit
	// headers (draft-ietf-httpapi-ratelimit-headers-10) to route-limited
	// answers, next to X-RateLimit-*. Default false: the draft still changes.
	IETFHeaders bool `mapstructure:"ietf_headers"`
}

// Values of [Limiter.Backend].
const (
	LimiterLocal = "local"
	LimiterRedis = "redis"
)

// Idempotency configures keyed writes.
type Idempotency struct {
	// Header is the request header carrying the key (canonical form).
	// Default "Idempotency-Key".
	Header string `mapstructure:"header"`
	// IdentityHeaders is the old spelling of Identity.Headers, kept as an
	// alias; it cannot be set together with Identity. Nil (the default)
	// means unset; an empty list means no header. See
	// [Idempotency.IdentitySources].
	IdentityHeaders []string `mapstructure:"identity_headers"`
	// Identity names the sources of the client's identity, which scopes a
	// key so one client never reads another's answer (DESIGN.md,
	// "Identity"). When nothing is configured (here or in
	// IdentityHeaders), the identity is the Authorization header.
	Identity Identity `mapstructure:"identity"`
	// RequireIdentity refuses a keyed write whose identity is empty (400
	// idempotency_identity_missing). Default true; false is for anonymous
	// APIs (see [Idempotency.ExplainIdentity]).
	RequireIdentity bool `mapstructure:"require_identity"`
	// Tenant is the scope's tenant for every host when TenantHosts is
	// empty; it must be "" when TenantHosts is set. Default "".
	Tenant string `mapstructure:"tenant"`
	// TenantHosts maps a host, in [NormalizeHost]'s form (lower-case ASCII,
	// no port, no trailing dot), to a tenant; a host without an entry has no
	// tenant. See [Idempotency.TenantFor].
	TenantHosts map[string]string `mapstructure:"tenant_hosts"`
	// Retention is how long a record lives from its claim. Default 25h.
	Retention time.Duration `mapstructure:"retention"`
	// Lease is a claim's lease, renewed every Lease/3. Default 120s.
	Lease time.Duration `mapstructure:"lease"`
	// MaxLease bounds lease renewal: the longest protected request.
	// Default 60m.
	MaxLease time.Duration `mapstructure:"max_lease"`
	// MaxBodyBytes caps a keyed request's body (413 request_too_large).
	// Default 1 MiB.
	MaxBodyBytes int64 `mapstructure:"max_body_bytes"`
	// MaxResponseBytes caps a stored answer; larger answers are sent but
	// not stored. Default 64 KiB.
	MaxResponseBytes int64 `mapstructure:"max_response_bytes"`
	// ReplayHeader is added with value "true" to replays; "" adds none.
	// Default "Idempotent-Replayed".
	ReplayHeader string `mapstructure:"replay_header"`
	// ReuseStatus is the status for a key reused with another request: 409
	// or 422. Default 409.
	ReuseStatus int `mapstructure:"reuse_status"`
	// ReleaseStatuses are upstream statuses that release the key instead of
	// storing the answer.
	ReleaseStatuses []int `mapstructure:"release_statuses"`
	// DropHeaders are response headers (canonical form) never stored or
	// replayed. Default none.
	DropHeaders []string `mapstructure:"drop_headers"`
	// EncryptionKeyEnv names an environment variable holding a base64
	// 32-byte key that encrypts stored bodies; "" stores them in clear.
	// Validate checks only the name, not the variable.
	EncryptionKeyEnv string `mapstructure:"encryption_key_env"`
	// InProgress is what a duplicate of a running request gets:
	// "reject" (409 idempotency_in_progress) or "wait"
	// (it waits for the original's answer; DESIGN.md, "Waiting for the
	// original"). Default "reject".
	InProgress string `mapstructure:"in_progress"`
	// WaitTimeout bounds a wait for the original, never past the route's
	// timeout. Default 10s.
	WaitTimeout time.Duration `mapstructure:"wait_timeout"`
	// LateAnswerWait is how long a keyed write's upstream call runs on
	// after its timeout, detached from the client that got 504, so that
	// its late answer is recorded and replayed to retries (DESIGN.md,
	// "Unknown outcomes"). 0 cancels the call at the timeout. A route's
	// timeout plus it must not exceed MaxLease. Default 5m.
	LateAnswerWait time.Duration `mapstructure:"late_answer_wait"`
	// LateAnswerMax bounds the calls kept past their timeout per process;
	// beyond it a timed-out call is cancelled and counted. Default 1000.
	LateAnswerMax int `mapstructure:"late_answer_max"`
	// UnknownOutcome is what happens to a keyed write whose outcome is
	// unknown (broken after it was sent, late wait over, holder died):
	// "takeover" (a retry takes it over after its lease) or
	// "hold" (every retry gets 409 idempotency_outcome_unknown until
	// it is resolved). Default "takeover".
	UnknownOutcome string `mapstructure:"unknown_outcome"`
	// MaxWaiters caps the duplicates that wait for one key's original in
	// one process (in_progress: wait); beyond it a duplicate gets 409 at
	// once; 0: none wait. Default 64.
	MaxWaiters int `mapstructure:"max_waiters"`
	// KeySyntax is the rule a key must follow: "strict" (1–255
	// characters from '!' to '~'), "printable" (1–255 visible ASCII
	// characters and inner spaces) or "sf-string" (an RFC 8941
	// string, whose value is the key). Default "strict".
	KeySyntax string `mapstructure:"key_syntax"`
	// AllowSharedAccounts says that, under profile stripe, an identity
	// without the Stripe-Account header is meant: a platform that acts
	// for connected accounts with one key then gets one account's answer
	// for another. Default false: validate refuses such an identity.
	AllowSharedAccounts bool `mapstructure:"allow_shared_accounts"`
}

// Errors is an errors section (DESIGN.md, "Error shapes"), global or per
// route. A route's Codes are added to the global ones; its other fields
// replace the global ones when set.
type Errors struct {
	// Codes renames codes of the error table (from → to).
	Codes map[string]string `mapstructure:"codes"`
	// ContentType is the body's media type. Default
	// application/problem+json, or application/json with a Body.
	ContentType string `mapstructure:"content_type"`
	// Body is a text/template of the body, with .Status, .Code, .Title,
	// .Detail, .RequestID and the function json; validated at load by
	// executing it with sample values.
	Body string `mapstructure:"body"`
	// Extensions is a text/template of a JSON object merged into a GraphQL
	// error's extensions (GraphQL routes).
	Extensions string `mapstructure:"extensions"`
}

// Identity is the sources of a client's identity: the identity is the hash
// of every configured source's value, in this order, and is empty when no
// source yields a non-empty value.
type Identity struct {
	// Headers are request headers (canonical form) whose exact values are
	// part of the identity. Nil means unset; an empty list means none.
	Headers []string `mapstructure:"headers"`
	// Cookies are cookie names whose values are part of the identity.
	Cookies []string `mapstructure:"cookies"`
	// JWT makes a verified token's claims part of the identity; it is
	// enabled when one of its key sources is set ([JWT.Enabled]).
	JWT JWT `mapstructure:"jwt"`
}

// JWT configures the identity's JSON Web Token source: the token is
// verified, and its claims, not the token, are the identity, so a
// refreshed token of the same user is the same client.
type JWT struct {
	// Header carries the token, as "Bearer <JWT>" (canonical form).
	// Default "Authorization" when Cookie is empty.
	Header string `mapstructure:"header"`
	// Cookie carries the token instead of a header.
	Cookie string `mapstructure:"cookie"`
	// Claims are the claims whose values are the identity. Default
	// ["iss", "sub"].
	Claims []string `mapstructure:"claims"`
	// JWKSFile is a JWK Set file, reloaded when it changes.
	JWKSFile string `mapstructure:"jwks_file"`
	// JWKSURL is a JWK Set URL, fetched, cached, and fetched again on an
	// unknown "kid" (at most every 30s); its keys keep verifying while it
	// is down.
	JWKSURL string `mapstructure:"jwks_url"`
	// HMACSecretEnv names an environment variable holding the HS256/384/512
	// secret (at least 32 bytes). Validate checks only the name.
	HMACSecretEnv string `mapstructure:"hmac_secret_env"`
	// Issuers are the accepted "iss" values; empty accepts any.
	Issuers []string `mapstructure:"issuers"`
	// Audiences are the accepted "aud" values, one match passes; empty
	// accepts any.
	Audiences []string `mapstructure:"audiences"`
	// Algorithms is the allow-list. Default ["RS256", "ES256", "EdDSA"];
	// "none" is never allowed.
	Algorithms []string `mapstructure:"algorithms"`
	// Leeway is the clock skew allowed for exp, nbf and iat. Default 30s.
	Leeway time.Duration `mapstructure:"leeway"`
}

// Enabled reports whether the JWT source is on: one of its key sources is
// set.
func (j JWT) Enabled() bool {
	return j.JWKSFile != "" || j.JWKSURL != "" || j.HMACSecretEnv != ""
}

// TokenHeader returns the header that carries the token: Header, or
// "Authorization" when neither Header nor Cookie is set; "" with a Cookie.
func (j JWT) TokenHeader() string {
	if j.Header == "" && j.Cookie == "" {
		return "Authorization"
	}
	return j.Header
}

// configured reports whether any source is configured (even as an empty
// list), so that the default Authorization header no longer applies.
func (i *Identity) configured() bool {
	return i.Headers != nil || i.Cookies != nil || !reflect.DeepEqual(i.JWT, defaultJWT())
}

func defaultJWT() JWT {
	return JWT{
		Claims:     []string{"iss", "sub"},
		Algorithms: []string{"RS256", "ES256", "EdDSA"},
		Leeway:     30 * time.Second,
	}
}

// DefaultIdentityHeaders is the identity when no source is configured.
var DefaultIdentityHeaders = []string{"Authorization"}

// IdentitySources returns the identity's sources as they apply: the
// identity_headers alias as Headers, else Identity when anything in it is
// configured, else Headers [DefaultIdentityHeaders]. (Validate refuses the
// alias together with Identity.) The result shares slices with id.
func (id *Idempotency) IdentitySources() Identity {
	switch {
	case id.IdentityHeaders != nil:
		return Identity{Headers: id.IdentityHeaders, JWT: defaultJWT()}
	case id.Identity.configured():
		return id.Identity
	}
	return Identity{Headers: slices.Clone(DefaultIdentityHeaders), JWT: defaultJWT()}
}

// IdentityChosen reports whether the config chooses the identity: it
// configures a source (idempotency.identity or identity_headers) and
// requires one. When it does not, `idemgate validate` prints
// [Idempotency.ExplainIdentity].
func (id *Idempotency) IdentityChosen() bool {
	src := id.IdentitySources()
	has := len(src.Headers) > 0 || len(src.Cookies) > 0 || src.JWT.Enabled()
	return (id.IdentityHeaders != nil || id.Identity.configured()) && has && id.RequireIdentity
}

// Sessions configures per-session turns.
type Sessions struct {
	// QueueDepth is how many requests may wait per session behind the
	// running one, per process. Default 4.
	QueueDepth int `mapstructure:"queue_depth"`
	// QueueTimeout bounds a wait for a turn (503 session_busy). Default 30s.
	QueueTimeout time.Duration `mapstructure:"queue_timeout"`
	// Lease is the lease of the cross-replica session lock (Redis store),
	// renewed every third of it: the longest a crashed holder blocks its
	// session. Default 10s.
	Lease time.Duration `mapstructure:"lease"`
}

// Route is one matched route.
type Route struct {
	// Name identifies the route in logs, metrics and errors; unique,
	// made of letters, digits, "_", "-" and ".". Required.
	Name string `mapstructure:"name"`
	// Method is an upper-case method token; requests' methods compare
	// case-insensitively ("post" is POST; HEAD is not GET). Required.
	Method string `mapstructure:"method"`
	// Path is a path template, like /ucp/v1/carts/{id}; see package
	// internal/pathtmpl and [Route.Template]. Required.
	Path string `mapstructure:"path"`
	// Idempotent makes the route read the key header (writes only).
	Idempotent bool `mapstructure:"idempotent"`
	// RequireKey refuses a request without a key (400
	// idempotency_key_missing); only with Idempotent.
	RequireKey bool `mapstructure:"require_key"`
	// Timeout overrides upstream.timeout when non-zero.
	Timeout time.Duration `mapstructure:"timeout"`
	// FingerprintIgnore lists RFC 6901 JSON pointers removed from a JSON
	// body before fingerprinting; only with Idempotent.
	FingerprintIgnore []string `mapstructure:"fingerprint_ignore"`
	// Protocol is "" (plain HTTP) or ProtocolGraphQL.
	Protocol string `mapstructure:"protocol"`
	// Mode is "" (inherit [Config.Mode]), ModeEnforce or ModeObserve.
	Mode string `mapstructure:"mode"`
	// Session, when non-nil, serializes requests per session id. In YAML it
	// is either a string naming a path parameter (session: id) or a map
	// (session: {header: X-Cart-Id}).
	Session *Session `mapstructure:"session"`
	// RateLimit, when non-nil, limits requests per client address and route.
	RateLimit *RateLimit `mapstructure:"rate_limit"`
	// InProgress overrides idempotency.in_progress ("" inherits).
	InProgress string `mapstructure:"in_progress"`
	// WaitTimeout overrides idempotency.wait_timeout when non-zero.
	WaitTimeout time.Duration `mapstructure:"wait_timeout"`
	// LateAnswerWait, when set (even to 0), overrides
	// idempotency.late_answer_wait.
	LateAnswerWait *time.Duration `mapstructure:"late_answer_wait"`
	// UnknownOutcome overrides idempotency.unknown_outcome ("" inherits).
	UnknownOutcome string `mapstructure:"unknown_outcome"`
	// Reconcile, when set, is the route's reconcile probe (DESIGN.md,
	// Unknown outcomes, 3): a lookup the proxy sends upstream to learn
	// whether an unknown record's write ran. Needs unknown_outcome: hold
	// and idempotency.encryption_key_env; refused on protocol: graphql.
	Reconcile *Reconcile `mapstructure:"reconcile"`
	// Retention overrides idempotency.retention when non-zero.
	Retention time.Duration `mapstructure:"retention"`
	// ReleaseStatuses, when set (even empty), replaces
	// idempotency.release_statuses: explicit statuses, no ranges.
	ReleaseStatuses []int `mapstructure:"release_statuses"`
	// DropHeaders, when set (even empty), replaces idempotency.drop_headers.
	DropHeaders []string `mapstructure:"drop_headers"`
	// Errors is merged over the global errors for this route's answers.
	Errors *Errors `mapstructure:"errors"`
}

// Reconcile is a route's reconcile probe: a GET or HEAD of Path on the
// route's upstream, with the original request's Host, identity headers
// and cookies, whose status says whether an unknown record's write ran.
type Reconcile struct {
	// Method is GET (also "") or HEAD.
	Method string `mapstructure:"method"`
	// Path is a path template whose placeholders are {key} (the
	// idempotency key) and the route's path parameters, each one whole
	// segment, filled percent-encoded. Required.
	Path string `mapstructure:"path"`
	// Found are the statuses that mean the write ran: the record completes
	// with the probe's answer. Default [200].
	Found []int `mapstructure:"found"`
	// Absent are the statuses that mean it did not: the key is released
	// once two absent answers at least Every apart agree, late enough.
	// Default [404].
	Absent []int `mapstructure:"absent"`
	// Status, when non-zero, replaces the probe's status in the completed
	// record (the original write's status, such as 201).
	Status int `mapstructure:"status"`
	// Every is how often an unknown record is probed again. Default 30s;
	// at least 1s.
	Every time.Duration `mapstructure:"every"`
}

// Reconcile defaults.
const (
	DefaultReconcileEvery = 30 * time.Second
	MinReconcileEvery     = time.Second
)

// ReconcileFound and ReconcileAbsent are the default found and absent
// statuses of a [Reconcile].
var (
	ReconcileFound  = []int{200}
	ReconcileAbsent = []int{404}
)

// ProtocolGraphQL is the value of [Route.Protocol] for GraphQL over HTTP.
const ProtocolGraphQL = "graphql"

// Session names where a request's session id comes from: exactly one of
// Param and Header is set.
type Session struct {
	// Param is a parameter of the route's path; the id is its value in the
	// normalized path (see [pathtmpl.Normalize] and [pathtmpl.Match.Param]).
	Param string `mapstructure:"param"`
	// Header is a request header (canonical form); the id is its value.
	Header string `mapstructure:"header"`
}

// RateLimit is a per-route limit per client address.
type RateLimit struct {
	// Requests is the number of requests allowed per Per. Required, > 0.
	Requests int `mapstructure:"requests"`
	// Per is the period. Required, > 0.
	Per time.Duration `mapstructure:"per"`
	// Algorithm is AlgorithmTokenBucket or AlgorithmWindow; Parse fills in
	// AlgorithmTokenBucket when it is empty, and "" means the same.
	Algorithm string `mapstructure:"algorithm"`
	// By is what the limit counts by: "client_ip" (also ""), "identity"
	// (verified JWT identities; anything else per address) or
	// "header:NAME" (a header a trusted proxy sets; per address without
	// it). Default "" (client_ip).
	By string `mapstructure:"by"`
	// Block is how long a client is refused after exceeding a window limit;
	// only with AlgorithmWindow. Parse fills in Per when it is zero, and 0
	// means the same.
	Block time.Duration `mapstructure:"block"`
}

// Values of [RateLimit.Algorithm].
const (
	AlgorithmTokenBucket = "token_bucket"
	AlgorithmWindow      = "window"
)

// Default returns the defaults of DESIGN.md: a configuration that is valid
// once Upstream.URL is set. Each call returns a new value sharing nothing
// with earlier ones.
func Default() *Config {
	return &Config{
		Listen:             ":8080",
		AdminListen:        ":9090",
		MaxBufferedBytes:   256 << 20,
		MaxHeaderBytes:     64 << 10,
		MaxConnections:     10000,
		RequestIDHeader:    "X-Request-Id",
		Profile:            ProfileDefault,
		RequestBodyTimeout: 30 * time.Second,
		Upstream: Upstream{
			Timeout: 60 * time.Second,
			Host:    HostPreserve,
		},
		TLS: TLS{Mode: TLSNone},
		Store: Store{
			Backend: StoreMemory,
			Memory: MemoryStore{
				MaxEntries: 1_000_000,
				MaxBytes:   1 << 30,
			},
			Redis: Redis{
				Addrs:        []string{"127.0.0.1:6379"},
				KeyPrefix:    "idemgate:",
				Timeout:      500 * time.Millisecond,
				AutoPipeline: true,
				RecordFormat: RecordCompact,
				ReplayCache:  ReplayCache{MaxEntries: 100_000, MaxBytes: 64 << 20},
			},
			Compression: CompressionNone,
		},
		ClientIP:  ClientIP{TrustedProxies: []string{}},
		EdgeLimit: EdgeLimit{Rate: 100, Burst: 200},
		Limiter:   Limiter{Backend: LimiterLocal, MaxClients: 1_000_000, IETFHeaders: false},
		Idempotency: Idempotency{
			Header:           "Idempotency-Key",
			Identity:         Identity{JWT: defaultJWT()},
			RequireIdentity:  true,
			TenantHosts:      map[string]string{},
			Retention:        25 * time.Hour,
			Lease:            120 * time.Second,
			MaxLease:         60 * time.Minute,
			MaxBodyBytes:     1 << 20,
			MaxResponseBytes: 64 << 10,
			ReplayHeader:     "Idempotent-Replayed",
			ReuseStatus:      409,
			ReleaseStatuses:  []int{307, 308, 400, 401, 403, 404, 405, 408, 409, 413, 415, 422, 425, 429, 503},
			DropHeaders:      []string{},
			InProgress:       modes.InProgressReject,
			WaitTimeout:      10 * time.Second,
			LateAnswerWait:   5 * time.Minute,
			LateAnswerMax:    1000,
			UnknownOutcome:   modes.UnknownTakeover,
			MaxWaiters:       64,
			KeySyntax:        modes.KeySyntaxStrict,
		},
		Sessions: Sessions{QueueDepth: 4, QueueTimeout: 30 * time.Second, Lease: 10 * time.Second},
		Mode:     ModeEnforce,
		PathCase: PathCaseInsensitive,
	}
}

// Tracing configures OpenTelemetry tracing. Where the spans go (endpoint,
// headers, sampler, service name) is the standard OTEL_* environment's.
// A restart applies a change.
type Tracing struct {
	// Enabled exports a server span per request, with children for the
	// claim, the session wait, the upstream call and the store write, with
	// the exporter and protocol of the OTEL_* environment (OTLP over
	// http/protobuf by default). OTEL_SDK_DISABLED=true or
	// OTEL_TRACES_EXPORTER=none turn it off again. Default false: no
	// request pays for tracing.
	Enabled bool `mapstructure:"enabled"`
}
