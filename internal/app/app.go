// Package app is idemgate's wiring: it turns a [config.Config] into the
// running pieces — the store, the limiters, the session queue, TLS, the
// admin API and the proxy — with one builder each (newStore, newLimiters,
// newQueue, newTLS, newAdmin). Each builder returns what it made and pushes
// what must be closed onto one LIFO stack, so that everything closes before
// what it uses. Start and hot reload call the same builders.
package app

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/admin"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/metered"
	"github.com/idemgate/idemgate/limiter"
	"github.com/idemgate/idemgate/proxy"
	"github.com/idemgate/idemgate/session"
)

// Options configure an [App] beyond its config.
type Options struct {
	// Logger receives the app's logs and the access log. Default: discard.
	Logger *slog.Logger
	// Transport, when set, replaces the upstream Transport (the demo,
	// tests).
	Transport http.RoundTripper
	// Version is reported by /healthz and idemgate_build_info.
	Version string
	// Revision is the VCS commit of the build, idemgate_build_info's
	// revision label ("" when unknown).
	Revision string
	// ConfigPath is the file watched for changes and read again on SIGHUP;
	// "" reloads nothing.
	ConfigPath string
	// AdminToken is the admin API's bearer token; "" disables the API.
	AdminToken string
}

// AdminTokenEnv names the environment variable main reads the admin API's
// token from.
const AdminTokenEnv = "IDEMGATE_ADMIN_TOKEN"

// App is one idemgate: its store, limiters, session queue, proxy, admin API
// and listeners. Build it with [New], run it with [App.Serve].
type App struct {
	cfg     *config.Config
	o       Options
	log     *slog.Logger
	closers closeStack // everything New opened, closed by Close

	store    keystore.Store
	ping     pinger // nil: the store has nothing to ping
	tls      *tlsState
	reg      *prometheus.Registry
	metrics  *proxy.Metrics
	reloads  *reloadMetrics
	proxy    *proxy.Proxy
	limits   atomic.Pointer[limitSet] // the running limiters, for the metrics
	adminAPI atomic.Pointer[admin.Handler]
	reload   reloadState

	ready, draining atomic.Bool
	public, admin   *http.Server
	// afterDrain, when set (tests), runs after the public server drained
	// and before the stores close.
	afterDrain func()
}

// New builds everything cfg describes. On error, what it opened is closed.
func New(cfg *config.Config, o Options) (_ *App, err error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	a := &App{cfg: cfg, o: o, log: o.Logger}
	logConfigWarnings(cfg, a.log)
	defer func() {
		if err != nil {
			a.closers.close()
		}
	}()
	st, err := newStore(cfg, &a.closers)
	if err != nil {
		return nil, err
	}
	a.reg, a.metrics, a.reloads = newRegistry(o.Version, o.Revision, &a.limits)
	a.store, a.ping = metered.New(st.store, a.reg), st.ping
	registerStoreGauges(a.reg, st)
	initRouteSeries(a.store, a.reloads, cfg)
	if a.tls, err = newTLS(cfg, st.client, a.log, &a.closers); err != nil {
		return nil, err
	}
	registerTLSGauges(a.reg, a.tls)
	popts, err := proxyOptions(cfg, o.Transport, a.store, a.metrics, a.log)
	if err != nil {
		return nil, err
	}
	if popts.Tracer, err = newTracer(cfg, o.Version, a.log, &a.closers); err != nil {
		return nil, err
	}
	// The limiters and the queue are the reload's to replace: they go on
	// stacks of their own, which the app's stack closes.
	a.closers.push(a.reload.close)
	set, err := newLimiters(cfg, a.log, &a.reload.limiters)
	if err != nil {
		return nil, err
	}
	q, err := newQueue(cfg, a.log, a.metrics.Session(), &a.reload.queue)
	if err != nil {
		return nil, err
	}
	popts.Stages = stages(cfg, set, q)
	popts.Idempotency.Notices = st.notices
	popts.Stages.OnErrorTemplate = a.reloads.templateFailed // kept by reloads
	if a.proxy, err = proxy.New(popts); err != nil {
		return nil, err
	}
	a.closers.pushCtx(a.proxy.Shutdown) // first: the renewals and retries of requests still running
	a.limits.Store(set)
	a.setAdminToken(o.AdminToken)
	a.public = NewServer(a.proxy, a.log)
	a.admin = NewServer(a.adminHandler(), a.log)
	return a, nil
}

// Close closes what New opened, last opened first. Serve calls it when it
// returns.
func (a *App) Close() error { return a.closers.close() }

// proxyOptions converts cfg into the proxy's options, without the stages.
func proxyOptions(cfg *config.Config, transport http.RoundTripper, st keystore.Store, m *proxy.Metrics, log *slog.Logger) (proxy.Options, error) {
	up, err := url.Parse(cfg.Upstream.URL)
	if err != nil {
		return proxy.Options{}, fmt.Errorf("upstream.url: %w", err)
	}
	trusted, err := cfg.ClientIP.Prefixes()
	if err != nil {
		return proxy.Options{}, fmt.Errorf("client_ip.trusted_proxies: %w", err)
	}
	id := cfg.Idempotency
	// Until the proxy is wired to internal/identity, refuse what it would
	// silently ignore: cookie and JWT identities, and limits by anything
	// but the client address.
	src := id.IdentitySources()
	if len(src.Cookies) > 0 || src.JWT.Enabled() {
		return proxy.Options{}, errors.New("idempotency.identity: cookies and jwt are not supported by this build yet; use headers")
	}
	for i, r := range cfg.Routes {
		if r.RateLimit != nil && r.RateLimit.By != "" && r.RateLimit.By != "client_ip" {
			return proxy.Options{}, fmt.Errorf("routes[%d].rate_limit.by: %q is not supported by this build yet; use client_ip", i, r.RateLimit.By)
		}
	}
	return proxy.Options{
		Upstream:     up,
		Timeout:      cfg.Upstream.Timeout,
		UpstreamHost: cfg.Upstream.Host == config.HostUpstream,
		Transport:    transport,
		Store:        st,
		Idempotency: proxy.Idempotency{
			Header:           id.Header,
			IdentityHeaders:  src.Headers,
			RequireIdentity:  id.RequireIdentity,
			TenantFor:        cfg.Idempotency.TenantFor, // the one tenant rule, the admin API's too
			Retention:        id.Retention,
			Lease:            id.Lease,
			MaxLease:         id.MaxLease,
			MaxBodyBytes:     id.MaxBodyBytes,
			MaxResponseBytes: id.MaxResponseBytes,
			ReplayHeader:     id.ReplayHeader,
			ReuseStatus:      id.ReuseStatus,
			ReleaseStatuses:  id.ReleaseStatuses,
			DropHeaders:      id.DropHeaders,
			InProgress:       id.InProgress,
			WaitTimeout:      id.WaitTimeout,
			WaitQueueDepth:   cmp.Or(cfg.Sessions.QueueDepth, -1), // 0: none wait
		},
		TrustedProxies:            trusted,
		ClientAddr:                limiter.ClientAddr,
		MaxBufferedBytes:          cfg.MaxBufferedBytes,
		MaxBufferedBytesPerClient: cfg.MaxBufferedBytesPerClient,
		RequestBodyTimeout:        cfg.RequestBodyTimeout,
		Logger:                    log.With("component", "proxy"),
		Metrics:                   m,
	}, nil
}

// stages is the proxy's stages for cfg's routes with the limiters of set
// and the queue q (nil: none).
func stages(cfg *config.Config, set *limitSet, q *session.Queue) proxy.Stages {
	pathCase, _ := cfg.PathCaseOption() // validated
	return proxy.Stages{
		Routes:      proxyRoutes(cfg),
		PathCase:    pathCase,
		Errors:      cfg.Errors.Spec(),
		Edge:        set.edge,
		RouteLimits: set.routes,
		IETFHeaders: cfg.Limiter.IETFHeaders,
		OnReject:    set.onReject,
		Sessions:    q,
	}
}

// proxyRoutes converts cfg's routes, with their effective modes.
func proxyRoutes(cfg *config.Config) []proxy.Route {
	var routes []proxy.Route
	for _, r := range cfg.Routes {
		pr := proxy.Route{
			Name:              r.Name,
			Method:            r.Method,
			Path:              r.Path,
			Idempotent:        r.Idempotent,
			RequireKey:        r.RequireKey,
			Timeout:           r.Timeout,
			FingerprintIgnore: r.FingerprintIgnore,
			Observe:           r.EffectiveMode(cfg.Mode) == config.ModeObserve,
			Protocol:          r.Protocol,
			Retention:         r.Retention,
			ReleaseStatuses:   r.ReleaseStatuses,
			DropHeaders:       r.DropHeaders,
			InProgress:        r.InProgress,
			WaitTimeout:       r.WaitTimeout,
		}
		if r.Errors != nil {
			spec := r.Errors.Spec()
			pr.Errors = &spec
		}
		if r.Session != nil {
			pr.Session = proxy.Session{Param: r.Session.Param, Header: r.Session.Header}
		}
		routes = append(routes, pr)
	}
	return routes
}
