// Package app is idemgate's wiring: it turns a [config.Config] into the
// running pieces — the store, the limiters, the session queue, TLS, the
// admin API and the proxy — with one builder each (newStore, newLimiters,
// newQueue, newTLS, newAdmin). Each builder returns what it made and pushes
// what must be closed onto one LIFO stack, so that everything closes before
// what it uses. Start and hot reload call the same builders.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/admin"
	"github.com/idemgate/idemgate/admin/console"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/clientaddr"
	"github.com/idemgate/idemgate/internal/connguard"
	"github.com/idemgate/idemgate/internal/identity"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/metered"
	"github.com/idemgate/idemgate/keystore/redisstore"
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

// App is one idemgate: its store, limiters, session queue, proxy, admin API
// and listeners. Build it with [New], run it with [App.Serve].
type App struct {
	cfg     *config.Config
	o       Options
	log     *slog.Logger
	closers closeStack // everything New opened, closed by Close

	store keystore.Store
	built builtStore             // what newStore made: the Redis store, the replay cache
	ping  pinger                 // nil: the store has nothing to ping
	epoch keystore.EpochReporter // store resets (/healthz, metrics)
	// redisTimeout is store.redis.timeout, shared by every Redis client
	// and the store's pipeline; applyLive sets it.
	redisTimeout *redisstore.Timeout
	retrier      *keystore.ReleaseRetrier // claims whose replies were lost
	// stopBy is the shutdown deadline (Serve's grace), once draining began:
	// the retrier's pending releases are tried until then.
	stopBy   atomic.Pointer[time.Time]
	tls      *tlsState
	reg      *prometheus.Registry
	metrics  *proxy.Metrics
	reloads  *reloadMetrics
	proxy    *proxy.Proxy
	limits   atomic.Pointer[limitSet] // the running limiters, for the metrics
	adminAPI atomic.Pointer[admin.Handler]
	// adminToken is the admin API's token, for its rebuilds; reload.mu
	// protects it.
	adminToken string
	console    atomic.Pointer[console.Handler]
	// cfgStatus is the config's revision and last reload, for the console.
	cfgStatus atomic.Pointer[console.ConfigStatus]
	reload    reloadState

	ready, draining atomic.Bool
	public, admin   *http.Server
	conns           []*limitListener // max_connections of each listener; reload.mu protects it
	headerLimit     *connguard.Limit // max_header_bytes of every listener (Serve); applyLive sets it
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
	a.redisTimeout = redisstore.NewTimeout(cfg.Store.Redis.Timeout)
	st, err := newStore(cfg, a.redisTimeout, a.log, &a.closers)
	if err != nil {
		return nil, err
	}
	a.reg, a.metrics, a.reloads = newRegistry(o.Version, o.Revision, &a.limits)
	ms := metered.New(st.store, a.reg)
	a.store, a.ping, a.epoch, a.built = ms, st.ping, st.epoch, st
	a.retrier = keystore.NewReleaseRetrier(ms, keystore.ReleaseRetrierOptions{})
	a.closers.push(a.closeRetrier) // before the store
	a.reg.MustRegister(&storeCollector{epoch: a.epoch, retrier: a.retrier})
	if st.cache != nil {
		a.reg.MustRegister(replayCacheStats(st.cache))
	} else {
		a.reg.MustRegister(openCacheStats(st.compressed)) // the cache of opened answers, in its place
	}
	registerStoreGauges(a.reg, st)
	registerUnknownGauge(a.reg, ms)
	initRouteSeries(a.store, a.reloads, cfg)
	if a.tls, err = newTLS(cfg, st.client, a.log, &a.closers); err != nil {
		return nil, err
	}
	registerTLSGauges(a.reg, a.tls)
	deps := proxy.Deps{
		Store:           a.store,
		Transport:       o.Transport,
		Notices:         st.notices,
		ClientAddr:      clientaddr.Resolve,
		Logger:          a.log.With("component", "proxy"),
		Metrics:         a.metrics,
		OnErrorTemplate: a.reloads.templateFailed,
	}
	deps.Releaser = a.retrier
	if deps.Tracer, err = newTracer(cfg, o.Version, a.log, &a.closers); err != nil {
		return nil, err
	}
	// The limiters, the queue and the identity resolver are the reload's
	// to replace: they go on stacks of their own, which the app's stack
	// closes.
	a.closers.push(a.reload.close)
	set, err := newLimiters(cfg, a.redisTimeout, a.log, &a.reload.limiters)
	if err != nil {
		return nil, err
	}
	q, err := newQueue(cfg, a.redisTimeout, a.log, a.metrics.Session(), &a.reload.queue)
	if err != nil {
		return nil, err
	}
	ident, err := newIdentity(cfg, o.Now, a.log, &a.reload.identity)
	if err != nil {
		return nil, err
	}
	pol, err := proxyPolicy(cfg, set, q, ident)
	if err != nil {
		return nil, err
	}
	a.proxy = proxy.New(deps)
	if err := a.proxy.Apply(pol); err != nil {
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

// closeRetrier stops the release retrier: its pending releases are tried until
// the shutdown deadline (a second from now when Serve set none), and those
// left are dropped, counted and logged.
func (a *App) closeRetrier() error {
	deadline := time.Now().Add(time.Second)
	if d := a.stopBy.Load(); d != nil {
		deadline = *d
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	if err := a.retrier.Close(ctx); err != nil {
		a.log.Error("claims whose replies were lost were not released before shutdown; their keys are held until their leases end", "component", "store", "error", err)
	}
	return nil
}

// proxyPolicy is the proxy's policy for cfg, with the limiters of set,
// the queue q (nil: none) and the identity resolver id: the one builder of
// the start and of every reload. Every value comes from cfg as it is:
// config.Default holds the defaults, and a route's own keys override the
// global ones in the proxy.
func proxyPolicy(cfg *config.Config, set *limitSet, q *session.Queue, id *identity.Resolver) (proxy.Policy, error) {
	u, err := url.Parse(cfg.Upstream.URL)
	if err != nil {
		return proxy.Policy{}, fmt.Errorf("upstream.url: %w", err)
	}
	trusted, err := cfg.ClientIP.Prefixes()
	if err != nil {
		return proxy.Policy{}, fmt.Errorf("client_ip.trusted_proxies: %w", err)
	}
	pathCase, _ := cfg.PathCaseOption()                             // validated
	keySyntax, _ := proxy.ParseKeySyntax(cfg.Idempotency.KeySyntax) // validated
	ic := cfg.Idempotency
	return proxy.Policy{
		Upstream: proxy.Upstream{URL: u, Host: cfg.Upstream.Host == config.HostUpstream, Timeout: cfg.Upstream.Timeout},
		Idempotency: proxy.Idempotency{
			Header:           ic.Header,
			KeySyntax:        keySyntax,
			TenantFor:        ic.TenantFor, // the one tenant rule, the admin API's too
			Retention:        ic.Retention,
			Lease:            ic.Lease,
			MaxLease:         ic.MaxLease,
			MaxBodyBytes:     ic.MaxBodyBytes,
			MaxResponseBytes: ic.MaxResponseBytes,
			ReplayHeader:     ic.ReplayHeader,
			ReuseStatus:      ic.ReuseStatus,
			ReleaseStatuses:  ic.ReleaseStatuses,
			DropHeaders:      ic.DropHeaders,
			InProgress:       ic.InProgress,
			WaitTimeout:      ic.WaitTimeout,
			MaxWaiters:       ic.MaxWaiters,
			UnknownOutcome:   ic.UnknownOutcome,
			LateAnswerWait:   ic.LateAnswerWait,
			LateAnswerMax:    ic.LateAnswerMax,
		},
		TrustedProxies:            trusted,
		MaxBufferedBytes:          cfg.MaxBufferedBytes,
		MaxBufferedBytesPerClient: cfg.MaxBufferedBytesPerClient,
		RequestBodyTimeout:        cfg.RequestBodyTimeout,
		Routes:                    proxyRoutes(cfg),
		PathCase:                  pathCase,
		RequestIDHeader:           cfg.RequestIDHeader,
		StripeShouldRetry:         cfg.Profile == config.ProfileStripe,
		Errors:                    cfg.Errors.Spec(),
		Edge:                      set.edge,
		RouteLimits:               set.routes,
		RouteBy:                   routeBy(cfg),
		IETFHeaders:               cfg.Limiter.IETFHeaders,
		Sessions:                  q,
		Identity:                  id,
		RequireIdentity:           cfg.Idempotency.RequireIdentity,
	}, nil
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

// proxyRoutes converts cfg's routes, with their effective modes and their
// own policy keys (the proxy takes the policy's global ones for the keys a
// route leaves unset).
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
			LateAnswerWait:    r.LateAnswerWait,
			UnknownOutcome:    r.UnknownOutcome,
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
