// Package app is idemgate's wiring: it turns a [config.Config] into the
// running pieces — the store, the limiters, the session queue, TLS, the
// admin API and the proxy — with one builder each (newStore, newLimiters,
// newQueue, newTLS, newAdmin). Each builder returns what it made and pushes
// what must be closed onto one LIFO stack, so that everything closes before
// what it uses. Start and hot reload call the same builders.
package app

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/admin"
	"github.com/idemgate/idemgate/admin/console"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/metered"
	"github.com/idemgate/idemgate/keystore/redisstore"
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
	// Now is the identity's clock: token times and JWK Set refresh
	// intervals. Default time.Now (tests inject one).
	Now func() time.Time
}

// AdminTokenEnv names the environment variable main reads the admin API's
// token from.
const AdminTokenEnv = "IDEMGATE_ADMIN_TOKEN"

// redisLogEvery is the least time between two log lines of one go-redis
// message (a failed dial is logged for every attempt while Redis is down).
const redisLogEvery = 10 * time.Second

// App is one idemgate: its store, limiters, session queue, proxy, admin API
// and listeners. Build it with [New], run it with [App.Serve].
type App struct {
	cfg     *config.Config
	o       Options
	log     *slog.Logger
	closers closeStack // everything New opened, closed by Close

	store    keystore.Store
	built    builtStore             // what newStore made: the Redis store, the replay cache
	ping     pinger                 // nil: the store has nothing to ping
	epoch    keystore.EpochReporter // store resets (/healthz, metrics)
	releaser *keystore.Releaser     // claims whose replies were lost; nil without claim ids
	// stopBy is the shutdown deadline (Serve's grace), once draining began:
	// the releaser's pending releases are tried until then.
	stopBy   atomic.Pointer[time.Time]
	tls      *tlsState
	reg      *prometheus.Registry
	metrics  *proxy.Metrics
	reloads  *reloadMetrics
	proxy    *proxy.Proxy
	limits   atomic.Pointer[limitSet] // the running limiters, for the metrics
	adminAPI atomic.Pointer[admin.Handler]
	console  atomic.Pointer[console.Handler]
	// cfgStatus is the config's revision and last reload, for the console.
	cfgStatus atomic.Pointer[console.ConfigStatus]
	reload    reloadState

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
	a.cfgStatus.Store(&console.ConfigStatus{Revision: 1, Applied: time.Now().UTC()})
	logConfigWarnings(cfg, a.log)
	defer func() {
		if err != nil {
			a.closers.close()
		}
	}()
	// go-redis logs (pool and dial trouble) go into the JSON log.
	// While Redis is down go-redis logs each failed dial (several a
	// second): one line per message every redisLogEvery, with a count.
	redis.SetLogger(&redisstore.Logger{L: a.log.With("component", "redis"), Every: redisLogEvery})
	st, err := newStore(cfg, a.log, &a.closers)
	if err != nil {
		return nil, err
	}
	a.reg, a.metrics, a.reloads = newRegistry(o.Version, o.Revision, &a.limits)
	ms := metered.New(st.store, a.reg)
	a.store, a.ping, a.epoch, a.built = ms, st.ping, st.epoch, st
	if _, ok := st.store.(keystore.ClaimStore); ok {
		a.releaser = keystore.NewReleaser(ms, keystore.ReleaserOptions{})
		a.closers.push(a.closeReleaser) // before the store
	}
	a.reg.MustRegister(&storeCollector{epoch: a.epoch, releaser: a.releaser})
	if st.cache != nil {
		a.reg.MustRegister(replayCacheCollector{st.cache})
	}
	registerStoreGauges(a.reg, st)
	registerUnknownGauge(a.reg, ms)
	initRouteSeries(a.store, a.reloads, cfg)
	if a.tls, err = newTLS(cfg, st.client, a.log, &a.closers); err != nil {
		return nil, err
	}
	registerTLSGauges(a.reg, a.tls)
	popts, err := proxyOptions(cfg, o.Transport, a.store, a.metrics, a.log)
	if err != nil {
		return nil, err
	}
	if a.releaser != nil {
		popts.Releaser = a.releaser
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
	ident, err := newIdentity(cfg, o.Now, a.log, &a.reload.identity)
	if err != nil {
		return nil, err
	}
	popts.Stages = stages(cfg, set, q, ident)
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

// closeReleaser stops the releaser: its pending releases are tried until
// the shutdown deadline (a second from now when Serve set none), and those
// left are dropped, counted and logged.
func (a *App) closeReleaser() error {
	deadline := time.Now().Add(time.Second)
	if d := a.stopBy.Load(); d != nil {
		deadline = *d
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := a.releaser.Close(ctx); err != nil {
		a.log.Error("claims whose replies were lost were not released before shutdown; their keys are held until their leases end", "component", "store", "error", err)
	}
	return nil
}

// proxyOptions converts cfg into the proxy's options, without the stages.
func proxyOptions(cfg *config.Config, transport http.RoundTripper, st keystore.Store, m *proxy.Metrics, log *slog.Logger) (proxy.Options, error) {
	pu, err := proxyUpstream(cfg)
	if err != nil {
		return proxy.Options{}, err
	}
	trusted, err := cfg.ClientIP.Prefixes()
	if err != nil {
		return proxy.Options{}, fmt.Errorf("client_ip.trusted_proxies: %w", err)
	}
	id := cfg.Idempotency
	return proxy.Options{
		Upstream:     pu.URL,
		Timeout:      pu.Timeout,
		UpstreamHost: pu.Host,
		Transport:    transport,
		Store:        st,
		Idempotency: proxy.Idempotency{
			Header:           id.Header,
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
			LateAnswerWait:   id.LateAnswerWait,
			UnknownOutcome:   id.UnknownOutcome,
			WaitQueueDepth:   cmp.Or(cfg.Idempotency.MaxWaiters, -1), // 0: none wait
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

// stages is the proxy's stages for cfg's routes with the limiters of set,
// the queue q (nil: none) and the identity resolver id.
func stages(cfg *config.Config, set *limitSet, q *session.Queue, id *identity.Resolver) proxy.Stages {
	pathCase, _ := cfg.PathCaseOption()                             // validated
	keySyntax, _ := proxy.ParseKeySyntax(cfg.Idempotency.KeySyntax) // validated
	return proxy.Stages{
		Routes:             proxyRoutes(cfg),
		PathCase:           pathCase,
		RequestBodyTimeout: cfg.RequestBodyTimeout,
		KeyHeader:          cfg.Idempotency.Header,
		LateAnswerMax:      cfg.Idempotency.LateAnswerMax,
		KeySyntax:          keySyntax,
		RequestIDHeader:    cfg.RequestIDHeader,
		MaxWaiters:         cmp.Or(cfg.Idempotency.MaxWaiters, -1), // 0: none wait
		StripeShouldRetry:  cfg.Profile == config.ProfileStripe,
		Errors:             cfg.Errors.Spec(),
		Edge:               set.edge,
		RouteLimits:        set.routes,
		RouteBy:            routeBy(cfg),
		IETFHeaders:        cfg.Limiter.IETFHeaders,
		OnReject:           set.onReject,
		Sessions:           q,
		Identity:           id,
		RequireIdentity:    cfg.Idempotency.RequireIdentity,
	}
}

// routeBy is what each route limit of cfg counts by; routes counted per
// client address are left out. Validate has checked every by.
func routeBy(cfg *config.Config) map[string]identity.By {
	m := map[string]identity.By{}
	for _, r := range cfg.Routes {
		if r.RateLimit == nil {
			continue
		}
		if by, err := identity.ParseBy(r.RateLimit.By); err == nil && by != identity.ByClientIP {
			m[r.Name] = by
		}
	}
	return m
}

// inherit returns own when set (even empty), else global, never nil: a
// proxy.Route's nil list means the proxy's start-time global.
func inherit[T any](own, global []T) []T {
	switch {
	case own != nil:
		return own
	case global != nil:
		return global
	}
	return []T{}
}

// proxyUpstream is cfg's upstream (a reload may change it).
func proxyUpstream(cfg *config.Config) (*proxy.Upstream, error) {
	u, err := url.Parse(cfg.Upstream.URL)
	if err != nil {
		return nil, fmt.Errorf("upstream.url: %w", err)
	}
	return &proxy.Upstream{URL: u, Host: cfg.Upstream.Host == config.HostUpstream, Timeout: cfg.Upstream.Timeout}, nil
}

// proxyRoutes converts cfg's routes, with their effective modes and their
// effective retention, in_progress, wait_timeout, release_statuses and
// drop_headers (a route's own, else the global ones of cfg), and cfg's
// reuse_status, replay_header and max_body_bytes. So a reload that changes
// only the global ones applies them to every route that inherits them
// (config.RestartOnly), and the proxy's start-time globals are never used.
func proxyRoutes(cfg *config.Config) []proxy.Route {
	id := cfg.Idempotency
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
			Retention:         cmp.Or(r.Retention, id.Retention),
			ReleaseStatuses:   inherit(r.ReleaseStatuses, id.ReleaseStatuses),
			DropHeaders:       inherit(r.DropHeaders, id.DropHeaders),
			InProgress:        cmp.Or(r.InProgress, id.InProgress),
			WaitTimeout:       cmp.Or(r.WaitTimeout, id.WaitTimeout),
			LateAnswerWait:    cmp.Or(r.LateAnswerWait, &id.LateAnswerWait),
			UnknownOutcome:    cmp.Or(r.UnknownOutcome, id.UnknownOutcome),
			ReuseStatus:       id.ReuseStatus,
			ReplayHeader:      &id.ReplayHeader,
			MaxBodyBytes:      id.MaxBodyBytes,
		}
		if r.Errors != nil {
			spec := r.Errors.Spec()
			pr.Errors = &spec
		}
		if r.Session != nil {
			pr.Session = proxy.Session{Param: r.Session.Param, Header: r.Session.Header}
		}
		if rc := r.Reconcile; rc != nil {
			pr.Reconcile = &proxy.Reconcile{Method: rc.Method, Path: rc.Path, Found: rc.Found, Absent: rc.Absent, Status: rc.Status, Every: rc.Every}
		}
		routes = append(routes, pr)
	}
	return routes
}
