package proxy

import (
	"cmp"
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

// Options is the tests' short way to a proxy: the dependencies and the
// policy in one value, with the zero fields taking testDefaults (the
// config's defaults; the proxy itself has none). newOpts builds it.
type Options struct {
	Upstream     *url.URL
	Timeout      time.Duration
	UpstreamHost bool
	Transport    http.RoundTripper

	Store       keystore.Store
	Idempotency Idempotency
	Notices     keystore.Notices
	Releaser    ClaimReleaser

	TrustedProxies            []netip.Prefix
	ClientAddr                func(peer netip.Addr, xff []string, trusted []netip.Prefix) netip.Addr
	MaxBufferedBytes          int64
	MaxBufferedBytesPerClient int64
	RequestBodyTimeout        time.Duration

	Now     func() time.Time
	Logger  *slog.Logger
	Metrics *Metrics
	Tracer  trace.Tracer

	Stages Stages
}

// Stages is the routes part of Options.
type Stages struct {
	Routes            []Route
	PathCase          pathtmpl.Case
	KeySyntax         KeySyntax
	RequestIDHeader   string
	StripeShouldRetry bool
	Edge              Limiter
	RouteLimits       map[string]Limiter
	IETFHeaders       bool
	RouteBy           map[string]identity.By
	Sessions          *session.Queue
	Errors            problem.Spec
	OnErrorTemplate   func(route string)
	Identity          *identity.Resolver
	RequireIdentity   bool
}

// The tests' defaults: config.Default's values.
const (
	testMaxWaiters    = 64
	testLateAnswerMax = 1000
)

// depsOf is o's dependencies.
func depsOf(o Options) Deps {
	return Deps{
		Store: o.Store, Transport: o.Transport, Releaser: o.Releaser, Notices: o.Notices,
		ClientAddr: o.ClientAddr, Now: o.Now, Logger: o.Logger, Metrics: o.Metrics, Tracer: o.Tracer,
		OnErrorTemplate: o.Stages.OnErrorTemplate,
	}
}

// policyOf is o's policy, its zero values defaulted.
func policyOf(o Options) Policy {
	id := o.Idempotency
	id.Header = cmp.Or(id.Header, "Idempotency-Key")
	id.KeySyntax = cmp.Or(id.KeySyntax, o.Stages.KeySyntax)
	id.Retention = cmp.Or(id.Retention, 25*time.Hour)
	id.Lease = cmp.Or(id.Lease, 120*time.Second)
	if id.MaxLease < id.Lease {
		id.MaxLease = max(60*time.Minute, id.Lease)
	}
	id.MaxBodyBytes = cmp.Or(id.MaxBodyBytes, 1<<20)
	id.MaxResponseBytes = cmp.Or(id.MaxResponseBytes, 64<<10)
	id.ReuseStatus = cmp.Or(id.ReuseStatus, http.StatusConflict)
	id.WaitTimeout = cmp.Or(id.WaitTimeout, 10*time.Second)
	id.MaxWaiters = cmp.Or(id.MaxWaiters, testMaxWaiters)
	id.LateAnswerMax = cmp.Or(id.LateAnswerMax, testLateAnswerMax)
	st := o.Stages
	return Policy{
		Upstream:                  Upstream{URL: o.Upstream, Host: o.UpstreamHost, Timeout: cmp.Or(o.Timeout, 60*time.Second)},
		Idempotency:               id,
		TrustedProxies:            o.TrustedProxies,
		MaxBufferedBytes:          cmp.Or(o.MaxBufferedBytes, 256<<20),
		MaxBufferedBytesPerClient: o.MaxBufferedBytesPerClient,
		RequestBodyTimeout:        cmp.Or(o.RequestBodyTimeout, 30*time.Second),
		Routes:                    st.Routes,
		PathCase:                  st.PathCase,
		RequestIDHeader:           st.RequestIDHeader,
		StripeShouldRetry:         st.StripeShouldRetry,
		Edge:                      st.Edge,
		RouteLimits:               st.RouteLimits,
		IETFHeaders:               st.IETFHeaders,
		RouteBy:                   st.RouteBy,
		Sessions:                  st.Sessions,
		Errors:                    st.Errors,
		Identity:                  st.Identity,
		RequireIdentity:           st.RequireIdentity,
	}
}

// newOpts is New(depsOf(o)) with policyOf(o) applied.
func newOpts(o Options) (*Proxy, error) {
	p := New(depsOf(o))
	if err := p.Apply(policyOf(o)); err != nil {
		return nil, err
	}
	return p, nil
}

// scopeKey is the store key of key sent under tenant by a client with the
// headers hdr, as p's running identity resolves it (no JWT claims).
func scopeKey(p *Proxy, tenant string, hdr http.Header, key string) keystore.Key {
	k, _ := p.LookupKey(tenant, hdr, nil, key) // fails only with claims
	return k
}
