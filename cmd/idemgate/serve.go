package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/keystore/sealed"
	"github.com/idemgate/idemgate/limiter"
	"github.com/idemgate/idemgate/proxy"
)

// Server timeouts (caddy's defaults): headers must arrive within a minute;
// idle keep-alive connections live five minutes; headers are at most 1 MiB.
const (
	readHeaderTimeout = time.Minute
	idleTimeout       = 5 * time.Minute
	maxHeaderBytes    = 1 << 20
	defaultGrace      = 30 * time.Second
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("idemgate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "config file (YAML)")
	grace := fs.Duration("grace", defaultGrace, "how long in-flight requests may run on after SIGTERM")
	level := fs.String("log-level", "info", "log level: debug, info, warn, error")
	flushEvery := fs.Duration("log-flush", 100*time.Millisecond, "write log lines in batches at least this often; 0 writes each line at once")
	if err := fs.Parse(args); err != nil {
		return errUsage
	}
	if *path == "" {
		fmt.Fprint(stderr, "idemgate: --config FILE is required\n"+usage)
		return errUsage
	}
	logOut := stderr
	if *flushEvery > 0 {
		lb := newLogBuffer(stderr, 64<<10, *flushEvery)
		defer lb.Close()
		logOut = lb
	}
	log, err := newLogger(logOut, *level)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return fmt.Errorf("%s: invalid config:\n%w", *path, err)
	}
	a, err := newApp(cfg, log, nil)
	if err != nil {
		return err
	}
	a.configPath = *path // reloaded on change and on SIGHUP (reload.go)
	return a.serve(ctx, *grace, nil)
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var lv slog.LevelVar
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: &lv,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				a.Value = slog.TimeValue(a.Value.Time().UTC())
			}
			return a
		},
	})), nil
}

// checkConfig refuses what this build cannot honour yet, rather than run
// with a guarantee silently missing.
func checkConfig(cfg *config.Config) error {
	return errors.Join(checkLimits(cfg)...)
}

// app is one running idemgate: its store, limiters, proxy and listeners.
type app struct {
	cfg      *config.Config
	log      *slog.Logger
	store    keystore.Store
	closers  []func() error // closed in order after the servers stopped
	proxy    *proxy.Proxy
	limits   *limitSet // the limiters' counters, for the metrics
	pingable interface{ Ping(context.Context) error }
	draining atomic.Bool
	ready    atomic.Bool

	public, admin *http.Server
	tls           tlsState // tls.go
	opsState               // metrics, admin API, config reload (admin.go, reload.go)
	// afterDrain, when set (tests), runs after the public server drained
	// and before the stores close.
	afterDrain func()
}

// newApp builds everything cfg describes. transport, when non-nil,
// replaces the upstream Transport (the demo and tests).
func newApp(cfg *config.Config, log *slog.Logger, transport http.RoundTripper) (*app, error) {
	a := &app{cfg: cfg, log: log}
	ok := false
	defer func() {
		if !ok {
			a.closeAll()
		}
	}()
	if err := a.openStore(); err != nil {
		return nil, err
	}
	a.initOps() // admin.go: metrics (the store's included)
	if err := a.buildTLS(); err != nil {
		return nil, err
	}
	opts, err := a.proxyOptions(cfg, transport)
	if err != nil {
		return nil, err
	}
	if err := a.buildLimits(&opts); err != nil {
		return nil, err
	}
	if err := a.buildSessions(&opts); err != nil {
		return nil, err
	}
	p, err := proxy.New(opts)
	if err != nil {
		return nil, err
	}
	a.proxy = p
	a.public = newServer(p, log)
	a.admin = newServer(a.adminHandler(), log)
	ok = true
	return a, nil
}

// proxyOptions converts cfg into the proxy's options, without the stages
// (buildLimits and buildSessions add them). A reload uses it too.
func (a *app) proxyOptions(cfg *config.Config, transport http.RoundTripper) (proxy.Options, error) {
	up, err := url.Parse(cfg.Upstream.URL)
	if err != nil {
		return proxy.Options{}, fmt.Errorf("upstream.url: %w", err)
	}
	trusted, err := cfg.ClientIP.Prefixes()
	if err != nil {
		return proxy.Options{}, fmt.Errorf("client_ip.trusted_proxies: %w", err)
	}
	id := cfg.Idempotency
	opts := proxy.Options{
		Upstream:     up,
		Timeout:      cfg.Upstream.Timeout,
		UpstreamHost: cfg.Upstream.Host == config.HostUpstream,
		Transport:    transport,
		Store:        a.store,
		Idempotency: proxy.Idempotency{
			Header:           id.Header,
			IdentityHeaders:  id.IdentityHeaders,
			RequireIdentity:  id.RequireIdentity,
			TenantFor:        cfg.Idempotency.TenantFor,
			Retention:        id.Retention,
			Lease:            id.Lease,
			MaxLease:         id.MaxLease,
			MaxBodyBytes:     id.MaxBodyBytes,
			MaxResponseBytes: id.MaxResponseBytes,
			ReplayHeader:     id.ReplayHeader,
			ReuseStatus:      id.ReuseStatus,
			ReleaseStatuses:  id.ReleaseStatuses,
			DropHeaders:      id.DropHeaders,
		},
		TrustedProxies:   trusted,
		ClientAddr:       limiter.ClientAddr,
		MaxBufferedBytes: cfg.MaxBufferedBytes,
		Logger:           a.log.With("component", "proxy"),
		Metrics:          a.metrics,
	}
	opts.Stages.Routes = proxyRoutes(cfg)
	return opts, nil
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
		}
		if r.Session != nil {
			pr.Session = proxy.Session{Param: r.Session.Param, Header: r.Session.Header}
		}
		routes = append(routes, pr)
	}
	return routes
}

func (a *app) openStore() error {
	cfg := a.cfg
	switch cfg.Store.Backend {
	case config.StoreRedis:
		rc := cfg.Store.Redis
		client, err := redisstore.NewClient(redisstore.ClientOptions{
			Addrs:      rc.Addrs,
			MasterName: rc.MasterName,
			Username:   rc.Username,
			Password:   rc.Password,
			DB:         rc.DB,
			Timeout:    rc.Timeout,
		})
		if err != nil {
			return fmt.Errorf("store.redis: %w", err)
		}
		a.closers = append(a.closers, client.Close)
		a.tls.rdb = client
		s, err := redisstore.New(client, redisstore.Options{KeyPrefix: rc.KeyPrefix})
		if err != nil {
			return fmt.Errorf("store.redis: %w", err)
		}
		a.store, a.pingable = s, s
	default:
		a.store = memstore.New(memstore.Options{
			MaxEntries: cfg.Store.Memory.MaxEntries,
			MaxBytes:   cfg.Store.Memory.MaxBytes,
		})
	}
	if env := cfg.Idempotency.EncryptionKeyEnv; env != "" {
		v, ok := os.LookupEnv(env)
		if !ok || v == "" {
			return fmt.Errorf("idempotency.encryption_key_env: environment variable %s is not set", env)
		}
		key, err := sealed.ParseKey(v)
		if err != nil {
			return fmt.Errorf("idempotency.encryption_key_env: %s: %w", env, err)
		}
		s, err := sealed.New(a.store, key)
		if err != nil {
			return fmt.Errorf("idempotency.encryption_key_env: %w", err)
		}
		a.store = s
	}
	// The store closes before the client it uses.
	a.closers = append([]func() error{a.store.Close}, a.closers...)
	return nil
}

func newServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// serve listens on the configured addresses (or on listeners handed in by
// tests and the demo) and runs until ctx ends, then drains.
func (a *app) serve(ctx context.Context, grace time.Duration, lns *listeners) error {
	if lns == nil {
		var err error
		if lns, err = listen(a.cfg.Listen, a.cfg.AdminListen); err != nil {
			a.closeAll()
			return err
		}
	}
	if err := a.startTLS(lns); err != nil {
		a.closeAll()
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveOn(a.public, lns.public) })
	g.Go(func() error { return serveOn(a.admin, lns.admin) })
	a.startReload(gctx, g) // reload.go
	if a.tls.http != nil {
		g.Go(func() error { return serveOn(a.tls.http, lns.http) })
	}
	a.ready.Store(true)
	a.log.Info("idemgate started", "listen", lns.public.Addr().String(), "admin_listen", lns.admin.Addr().String(),
		"upstream", a.cfg.Upstream.URL, "store", a.cfg.Store.Backend, "routes", len(a.cfg.Routes), "version", version)
	g.Go(func() error {
		<-gctx.Done()
		a.draining.Store(true)
		a.log.Info("draining", "grace", grace.String())
		sctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		err := a.public.Shutdown(sctx)
		if err != nil {
			a.log.Error("in-flight requests did not finish within the grace period", "error", err)
		}
		if a.afterDrain != nil {
			a.afterDrain()
		}
		a.admin.Shutdown(sctx)
		if a.tls.http != nil {
			a.tls.http.Shutdown(sctx)
		}
		return nil
	})
	err := g.Wait()
	a.closeAll()
	a.log.Info("idemgate stopped")
	return err
}

func serveOn(s *http.Server, l net.Listener) error {
	if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func (a *app) closeAll() {
	if a.proxy != nil {
		a.proxy.Close()
	}
	for _, c := range a.closers {
		if err := c(); err != nil {
			a.log.Warn("close", "error", err)
		}
	}
	a.closers = nil
}

// listeners are the bound listeners; http (tls.http_listen) is bound by
// startTLS when nil and needed.
type listeners struct{ public, admin, http net.Listener }

func listen(public, admin string) (*listeners, error) {
	p, err := net.Listen("tcp", public)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ad, err := net.Listen("tcp", admin)
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("admin_listen: %w", err)
	}
	return &listeners{public: p, admin: ad}, nil
}

// adminHandler serves /healthz and /readyz (open, for probes).
func (a *app) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		store := map[string]string{"backend": a.cfg.Store.Backend, "status": "ok"}
		if a.pingable != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := a.pingable.Ping(ctx); err != nil {
				store["status"] = "unavailable"
				store["error"] = strings.SplitN(err.Error(), "\n", 2)[0]
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": version, "store": store})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		// Deliberately not the store's health (DESIGN.md, Admin listener).
		switch {
		case a.draining.Load():
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		case !a.ready.Load():
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "starting"})
		default:
			writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
		}
	})
	a.mountOps(mux) // admin.go: /metrics, /admin/
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
