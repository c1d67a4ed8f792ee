package main

import (
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemgate/idemgate/admin"
	"github.com/idemgate/idemgate/proxy"
)

// adminTokenEnv names the environment variable holding the admin API's
// bearer token; unset or empty disables /admin/.
const adminTokenEnv = "IDEMGATE_ADMIN_TOKEN"

// opsState is the operations side of an app: its metrics registry, the
// admin API's token and the configuration reload's state (admin.go,
// reload.go). It holds only pointers and plain values, so that a reload can
// build stages on a copy of the app (see shadow).
type opsState struct {
	// reg is the app's own registry: no collector is ever global.
	reg *prometheus.Registry
	// metrics is the proxy's collectors. Other parts of the app record on
	// it: the session queue through metrics.Session().
	metrics *proxy.Metrics
	// configPath is the file to watch for changes; "" watches nothing (the
	// demo, tests that do not reload).
	configPath string
	// adminAPI is the /admin/ handler (see setAdminToken).
	adminAPI *atomic.Pointer[admin.Handler]
	// rl is the reload state; nil until initOps.
	rl *reloadState
	// limitsMetric is the limiters whose counters /metrics exports now.
	limitsMetric *atomic.Pointer[limitSet]
}

// initOps makes the registry and the metrics, and wraps the store so that
// its operations are measured. newApp calls it right after opening the
// store.
func (a *app) initOps() {
	a.reg = prometheus.NewRegistry()
	a.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	a.metrics = proxy.NewMetrics(a.reg, version)
	a.store = a.metrics.Store(a.store)
	a.rl = &reloadState{}
	a.limitsMetric = new(atomic.Pointer[limitSet])
	a.adminAPI = new(atomic.Pointer[admin.Handler])
	a.reg.MustRegister(&limitsCollector{a.limitsMetric})
	a.closers = append(a.closers, a.closeStages)
}

// mountOps adds /metrics (open, like the probes) and /admin/ (behind the
// token) to the admin listener's mux.
func (a *app) mountOps(mux *http.ServeMux) {
	if a.reg == nil {
		return
	}
	if a.limits != nil && a.limitsMetric.Load() == nil {
		a.limitsMetric.Store(a.limits)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
		ErrorHandling:     promhttp.ContinueOnError,
		Registry:          a.reg, // promhttp's own error counter
		EnableOpenMetrics: true,
	}))
	a.setAdminToken(os.Getenv(adminTokenEnv))
	mux.Handle("/admin/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := a.adminAPI.Load(); h != nil {
			h.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	}))
}

// setAdminToken (re)builds the admin API with token ("" disables it). The
// token comes from $IDEMGATE_ADMIN_TOKEN at start; tests set their own.
func (a *app) setAdminToken(token string) {
	log := a.log.With("component", "admin")
	st, ok := a.store.(admin.Store)
	if !ok {
		log.Warn("the store has no admin operations; /admin/ is disabled")
		return
	}
	h, err := admin.New(admin.Options{
		Store:            st,
		Token:            token,
		ScopeKey:         a.proxy.ScopeKey,
		TenantFor:        a.cfg.Idempotency.TenantFor,
		MaxResponseBytes: a.cfg.Idempotency.MaxResponseBytes,
		Registerer:       a.reg,
		Logger:           log,
	})
	if err != nil {
		log.Error("admin API disabled", "error", err)
		return
	}
	switch {
	case token == "":
		log.Info("admin API disabled: " + adminTokenEnv + " is not set")
	case len(token) < 16:
		log.Warn("admin API token is short; use at least 16 random characters", "env", adminTokenEnv)
	}
	a.adminAPI.Store(h)
}

// limitsCollector exports the counters the limiters keep themselves
// (limits.go's limitSet): states dropped to make room, and requests let
// through because the Redis limiter could not decide. Rejections are
// counted by proxy.Metrics from the requests' outcomes.
type limitsCollector struct{ set *atomic.Pointer[limitSet] }

var (
	limiterEvictionsDesc = prometheus.NewDesc("idemgate_limiter_evictions_total",
		"Client states a local limiter dropped before they were fresh, to stay within limiter.max_clients, by limiter (edge, route:<name>). Counts restart when a reload rebuilds the limiters.",
		[]string{"limiter"}, nil)
	limiterFallbacksDesc = prometheus.NewDesc("idemgate_limiter_fallbacks_total",
		"Requests let through unlimited because the Redis limiter could not decide (limiter.backend redis). Counts restart when a reload rebuilds the limiters.",
		nil, nil)
)

func (c *limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- limiterEvictionsDesc
	ch <- limiterFallbacksDesc
}

func (c *limitsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.set.Load()
	if s == nil {
		return
	}
	for name, n := range s.evictions() {
		ch <- prometheus.MustNewConstMetric(limiterEvictionsDesc, prometheus.CounterValue, float64(n), name)
	}
	ch <- prometheus.MustNewConstMetric(limiterFallbacksDesc, prometheus.CounterValue, float64(s.fallbacks()))
}
