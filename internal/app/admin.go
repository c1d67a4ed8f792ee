package app

import (
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemgate/idemgate/admin"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/proxy"
)

// adminHandler serves the admin listener: /healthz and /readyz (open, for
// probes; health.go), /metrics (open), /admin/ (behind the token) and the
// operator console /ui/ (its own login with the token).
func (a *App) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          a.reg, // promhttp's own error counter
		EnableOpenMetrics: true,
	}))
	mux.Handle("/admin/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := a.adminAPI.Load(); h != nil {
			h.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	}))
	// The operator console: its own session login, never the Bearer
	// token's (admin/console).
	mux.Handle("/ui/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := a.console.Load(); h != nil {
			h.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	}))
	return mux
}

// setAdminToken (re)builds the admin API and the console with token (""
// disables them), on the running config.
func (a *App) setAdminToken(token string) {
	log := a.log.With("component", "admin")
	a.reload.mu.Lock()
	a.adminToken = token
	a.reload.mu.Unlock()
	cfg := a.liveConfig()
	h, err := newAdmin(cfg, a.store, a.proxy, a.reg, log, token, a.busiest)
	if err != nil {
		log.Error("admin API disabled", "error", err)
		return
	}
	switch {
	case token == "":
		log.Info("admin API disabled: " + AdminTokenEnv + " is not set")
	case len(token) < 16:
		log.Warn("admin API token is short; use at least 16 random characters", "env", AdminTokenEnv)
	}
	a.adminAPI.Store(h)
	// The console calls the running admin API: a reload rebuilds it.
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.adminAPI.Load().ServeHTTP(w, r) })
	c, err := a.newConsole(api, token, cfg.AdminHost, a.log.With("component", "console"))
	if err != nil {
		log.Error("operator console disabled", "error", err)
		return
	}
	if old := a.console.Swap(c); old != nil {
		old.Close()
	}
}

// busiest is the running limiters' busiest clients (admin
// Options.Clients): a reload that rebuilds the limiters starts them afresh.
func (a *App) busiest() []admin.LimiterClients {
	if set := a.limits.Load(); set != nil {
		return set.busiest()
	}
	return nil
}

// reloadAdmin rebuilds the admin API on applied (its tenant rule, answer
// cap and drop_headers) and gives the console applied's admin_host. The
// console's sessions stay. reload.mu is held.
func (a *App) reloadAdmin(applied *config.Config) {
	if a.adminAPI.Load() == nil {
		return // disabled: no store for it
	}
	h, err := newAdmin(applied, a.store, a.proxy, a.reg, a.log.With("component", "admin"), a.adminToken, a.busiest)
	if err != nil {
		a.log.Error("admin API kept on the previous config", "component", "admin", "error", err)
		return
	}
	a.adminAPI.Store(h)
	if c := a.console.Load(); c != nil {
		c.SetHosts(hostList(applied.AdminHost))
	}
}

// newAdmin builds the admin API on st with token. It finds records by the
// proxy's key look-up (the running identity's Lookup) and the config's one
// tenant rule, and drops from an operator's answer what the record's
// running route drops.
func newAdmin(cfg *config.Config, st keystore.Store, p *proxy.Proxy, reg prometheus.Registerer, log *slog.Logger, token string, clients func() []admin.LimiterClients) (*admin.Handler, error) {
	ast, ok := st.(admin.Store)
	if !ok {
		return nil, errNoAdminStore
	}
	return admin.New(admin.Options{
		Store:            ast,
		Token:            token,
		ScopeKey:         p.LookupKey,
		RouteDropHeaders: p.RouteDropHeaders,
		RequestIDHeader:  p.RequestIDHeader,
		TenantFor:        cfg.Idempotency.TenantFor,
		MaxResponseBytes: cfg.Idempotency.MaxResponseBytes,
		DropHeaders:      cfg.Idempotency.DropHeaders,
		Clients:          clients,
		Registerer:       reg,
		Logger:           log,
	})
}
