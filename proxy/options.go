package proxy

import (
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/internal/pathtmpl"
	"github.com/idemgate/idemgate/internal/problem"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/session"
)

// Upstream is where requests go: the API's base URL, whether the
// upstream's host is sent instead of the client's, and the default
// timeout of keyed writes and pass-through requests.
type Upstream struct {
	URL     *url.URL
	Host    bool
	Timeout time.Duration
}

// Deps are a [Proxy]'s long-lived dependencies: what [New] takes and no
// reload changes. Every setting is in the [Policy].
type Deps struct {
	// Store holds the records; required when a route is idempotent.
	Store keystore.Store
	// Transport carries requests upstream. Default: [NewTransport].
	Transport http.RoundTripper
	// Releaser, when set, takes the claim ids of claims whose replies were
	// lost (Reserve failed with a store error), to release them once the
	// store answers (DESIGN.md step 8): a [keystore.ReleaseRetrier].
	Releaser ClaimReleaser
	// Notices carries completion notices to waiters (wait.go). Default: an
	// in-process keystore.Hub; replicas sharing a store need a shared one
	// (redisstore.Notices), or their waiters only poll.
	Notices keystore.Notices
	// ClientAddr decides the client address of a request. Default:
	// [clientaddr.Resolve] (the TCP peer, or the rightmost untrusted
	// X-Forwarded-For entry when the peer is a trusted proxy).
	ClientAddr func(peer netip.Addr, xff []string, trusted []netip.Prefix) netip.Addr
	// Now is the clock of the limiters, the lease renewals and the
	// completion retries. Default time.Now.
	Now func() time.Time
	// Logger receives one access-log line per request and the proxy's
	// errors. Default: discard.
	Logger *slog.Logger
	// Metrics, when set, records the requests' metrics (see metrics.go).
	Metrics *Metrics
	// Tracer, when set, traces each request (tracing.go): a server span
	// and children for the claim, the session wait, the upstream call and
	// the store write. Nil: no tracing, at no cost.
	Tracer trace.Tracer
	// OnErrorTemplate, when set, is called (after the failure was logged)
	// whenever an errors template failed at run time and problem+json was
	// sent instead.
	OnErrorTemplate func(route string)
}

// ClaimReleaser releases claims whose replies were lost; Add reports false
// when it dropped the release. [keystore.ReleaseRetrier] is one.
type ClaimReleaser interface {
	Add(key keystore.Key, id keystore.ClaimID, lease time.Duration) bool
}

// Policy is everything configurable about a [Proxy]: a plain value built
// from the config (internal/app's one builder, at start and on reload) and
// compiled by [Proxy.Apply] into the snapshot requests run on. It holds no
// defaults: the config's are the only ones (config.Default), and a zero
// value means what its field says. The limiters, the session queue and the
// identity resolver are built with it and carried by it.
type Policy struct {
	// Upstream is where requests go; its URL must be absolute and its
	// Timeout > 0.
	Upstream    Upstream
	Idempotency Idempotency

	// TrustedProxies are the peers whose X-Forwarded-For is believed.
	TrustedProxies []netip.Prefix
	// MaxBufferedBytes bounds the keyed request bodies held at once, and
	// the buffers derived from them; MaxBufferedBytesPerClient bounds one
	// client address block's share (<= 0: a quarter of MaxBufferedBytes).
	MaxBufferedBytes          int64
	MaxBufferedBytesPerClient int64
	// RequestBodyTimeout is how long after its headers a keyed request's
	// body may take to arrive (408 request_timeout); 0: no deadline.
	RequestBodyTimeout time.Duration

	Routes []Route
	// PathCase is how the routes' literal path segments compare with a
	// request's (path_case); the zero value is case-insensitive.
	PathCase pathtmpl.Case
	// RequestIDHeader names the header a request ID is read from,
	// forwarded in and answered with (request_id_header); "": X-Request-Id.
	RequestIDHeader string
	// StripeShouldRetry adds Stripe-Should-Retry to the proxy's own
	// answers, as Stripe's API sends it (profile: stripe): false on
	// idempotency_key_reused, idempotency_outcome_unknown and
	// idempotency_response_too_large, true on idempotency_in_progress.
	StripeShouldRetry bool

	// Edge counts every request, matched or not, per client address
	// (DESIGN.md step 1). Nil: no edge limit.
	Edge Limiter
	// RouteLimits count the requests of a route per client address, by
	// route name (step 3). A route without an entry is not limited; no
	// value may be nil.
	RouteLimits map[string]Limiter
	// IETFHeaders adds the IETF draft's RateLimit-Policy and RateLimit
	// headers to route-limited answers (see ratelimit.go).
	IETFHeaders bool
	// RouteBy is what each route's limit counts by (DESIGN.md,
	// *Identity*): [identity.ByClientIP] (also a route without an entry),
	// [identity.ByIdentity] (verified JWT identities; anything else per
	// client address) or a header.
	RouteBy map[string]identity.By

	// Sessions is the queue of the session turns (step 6). Nil: no
	// request takes a turn.
	Sessions *session.Queue

	// Errors is the shape of the proxy's own answers (DESIGN.md, Error
	// shapes) before a route matches and on routes without their own.
	Errors problem.Spec
	// Identity resolves clients' identities: the scope of keyed writes and
	// route limits by identity (DESIGN.md, *Identity*). Nil: the exact
	// values of Idempotency.IdentityHeaders. The proxy does not close it.
	Identity *identity.Resolver
	// RequireIdentity refuses a keyed write whose identity is empty (400
	// idempotency_identity_missing).
	RequireIdentity bool
}

// Idempotency is the idempotency section of the policy. Routes may
// override the keys [Route] names.
type Idempotency struct {
	Header string // the key header (canonicalized by Apply); required
	// KeySyntax is the rule a key header's value must follow
	// (idempotency.key_syntax); the zero value is [KeyStrict].
	KeySyntax KeySyntax
	// IdentityHeaders are the identity when Policy.Identity is nil: their
	// exact values, as [identity.Options.Headers].
	IdentityHeaders []string
	// TenantFor returns the tenant of a request's Host header, the first
	// part of every record's and session line's key, and false when the
	// host has none: a keyed write to it gets 421 tenant_unknown. It is
	// config's Idempotency.TenantFor, the one tenant rule. Nil: one
	// tenant, "", for every host.
	TenantFor        func(host string) (tenant string, ok bool)
	Retention        time.Duration
	Lease            time.Duration // > 0
	MaxLease         time.Duration // >= Lease
	MaxBodyBytes     int64         // > 0
	MaxResponseBytes int64         // > 0
	ReplayHeader     string        // "" adds no header
	ReuseStatus      int           // 409 or 422
	ReleaseStatuses  []int
	DropHeaders      []string
	// InProgress is what a duplicate of a running request gets:
	// "reject" (also "", 409) or "wait" (wait.go).
	InProgress string
	// WaitTimeout bounds a wait for the original, never past the route's
	// timeout; it must be > 0 when a keyed route waits without a
	// WaitTimeout of its own ([Proxy.Apply] names it otherwise).
	WaitTimeout time.Duration
	// MaxWaiters caps the waiters per key per process; beyond it a
	// duplicate gets 409 at once. 0: none wait.
	MaxWaiters int
	// UnknownOutcome is what happens to a claim whose outcome is unknown
	// (DESIGN.md, Unknown outcomes): "takeover" (also "": a retry
	// takes it over after its lease) or "hold" (it is held as an
	// unknown record until resolved). A route's own overrides it.
	UnknownOutcome string
	// LateAnswerWait is how long a keyed write's upstream call runs on
	// after its timeout, detached from the client that got 504, so that its
	// late answer is recorded (late.go; DESIGN.md, Unknown outcomes). 0:
	// the call is cancelled at the timeout. A route's own overrides it.
	LateAnswerWait time.Duration
	// LateAnswerMax bounds the upstream calls kept past their timeout in
	// this process (late_answer_max; late.go); beyond it a timed-out call
	// is cancelled and counted. It must be > 0 when a keyed route has a
	// late answer wait ([Proxy.Apply] names it otherwise).
	LateAnswerMax int
}

// Reconcile is a route's reconcile probe (DESIGN.md, Unknown outcomes, 3).
type Reconcile struct {
	// Method is GET (also "") or HEAD.
	Method string
	// Path is a path template: {key} is the idempotency key, other
	// placeholders the route's path parameters.
	Path string
	// Found and Absent are the statuses that mean the write ran, and
	// that it did not. Nil: [200] and [404].
	Found, Absent []int
	// Status, when > 0, replaces a found answer's status.
	Status int
	// Every is how often an unknown record is probed again. Default 30s.
	Every time.Duration
}

// Session names where a route's session id comes from: a path parameter or
// a header. The zero Session means the route takes no turns.
type Session struct {
	Param  string
	Header string
}

// Route is one configured route.
type Route struct {
	Name   string
	Method string
	// Path is the path template, e.g. /ucp/v1/carts/{id}.
	Path string
	// Idempotent routes read the key header and claim keys.
	Idempotent bool
	// RequireKey refuses keyed-route requests without a key (400).
	RequireKey bool
	// Timeout overrides Policy.Upstream.Timeout for this route when > 0.
	Timeout time.Duration
	// FingerprintIgnore lists JSON pointers removed from a JSON body before
	// it is fingerprinted.
	FingerprintIgnore []string
	// Session, when set, makes requests take turns per session id.
	Session Session
	// Protocol is "" or ProtocolGraphQL: a GraphQL endpoint, where only
	// mutations are keyed (graphql.go).
	Protocol string
	// Observe runs an idempotent route in observe mode: keys are checked,
	// claimed and recorded, but nothing is refused or replayed; what would
	// have happened is reported instead (see observe.go).
	Observe bool

	// Per-route policy (DESIGN.md, Config); zero values inherit
	// Policy.Idempotency's.

	// Retention overrides Idempotency.Retention when > 0.
	Retention time.Duration
	// ReleaseStatuses, when non-nil, replaces Idempotency.ReleaseStatuses
	// (an empty list: no status releases the key).
	ReleaseStatuses []int
	// DropHeaders, when non-nil, replaces Idempotency.DropHeaders.
	DropHeaders []string
	// InProgress is "reject", "wait" or "" (inherit).
	InProgress string
	// WaitTimeout overrides Idempotency.WaitTimeout when > 0.
	WaitTimeout time.Duration
	// LateAnswerWait, when non-nil, replaces Idempotency.LateAnswerWait
	// (0: the call is cancelled at the timeout).
	LateAnswerWait *time.Duration
	// UnknownOutcome is "takeover", "hold" or "" (inherit).
	UnknownOutcome string
	// Reconcile, when set, is the route's reconcile probe (reconcile.go);
	// only on a keyed route with unknown_outcome: hold.
	Reconcile *Reconcile
	// ReuseStatus overrides Idempotency.ReuseStatus when > 0.
	ReuseStatus int
	// MaxBodyBytes overrides Idempotency.MaxBodyBytes when > 0.
	MaxBodyBytes int64
	// ReplayHeader, when non-nil, replaces Idempotency.ReplayHeader ("":
	// replays get no header).
	ReplayHeader *string
	// Errors is merged over Policy.Errors ([problem.Spec.Merge]) for
	// this route's answers.
	Errors *problem.Spec
}
