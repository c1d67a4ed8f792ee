package app

import (
	"regexp"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/metric"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/proxy"
)

// newRegistry makes the app's own registry (no collector is ever global)
// with the Go and process collectors, the pipeline's metrics, the reload
// gauges and the limiters' counters (which read whatever limiters the
// pointer holds: a reload swaps them).
func newRegistry(version, revision string, limits *atomic.Pointer[limitSet]) (*prometheus.Registry, *proxy.Metrics, *reloadMetrics) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		// go_gc_heap_live_bytes (the heap the last collection found live)
		// on top of the defaults: with go_memstats_heap_inuse_bytes it tells
		// live memory from garbage not yet collected (Bounds; issue 28).
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
			collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&limitsCollector{limits},
	)
	return reg, proxy.NewMetrics(reg, version, revision), newReloadMetrics(reg)
}

// reloadMetrics are the configuration reload's gauges and counter.
type reloadMetrics struct {
	reloads     *prometheus.CounterVec // result
	lastReload  prometheus.Gauge
	lastSuccess prometheus.Gauge
	restart     prometheus.Gauge
	// errTemplates counts errors templates that failed at run time (the
	// config's errors section; problem+json was sent instead), by route.
	errTemplates *prometheus.CounterVec
}

func newReloadMetrics(reg prometheus.Registerer) *reloadMetrics {
	f := promauto.With(reg)
	m := &reloadMetrics{
		reloads: metric.CounterVec(f, "idemgate_config_reloads_total",
			"Configuration reloads, by result: success (applied, or nothing to apply) or failure (refused; the running configuration kept serving).", "result"),
		lastReload: metric.Gauge(f, "idemgate_config_last_reload_successful",
			"1 if the last configuration reload succeeded (or none was tried), 0 if it was refused."),
		lastSuccess: metric.Gauge(f, "idemgate_config_last_reload_success_timestamp_seconds",
			"Unix time of the last successful configuration load (the start, or a reload)."),
		restart: metric.Gauge(f, "idemgate_config_restart_required",
			"1 while the configuration file changes keys that only a restart applies (listeners, store, upstream, idempotency, ...)."),
	}
	m.errTemplates = metric.CounterVec(f, "idemgate_error_template_failures_total",
		"Answers whose errors template failed at run time and were sent as problem+json instead, by route (\"\" before a route matched).", "route")
	m.lastReload.Set(1)
	m.lastSuccess.SetToCurrentTime()
	// Series that exist from the start, so that dashboards and alerts see
	// zeros rather than nothing.
	for _, r := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(r)
	}
	m.errTemplates.WithLabelValues("")
	return m
}

// templateFailed counts an errors template that failed at run time.
func (m *reloadMetrics) templateFailed(route string) {
	m.errTemplates.WithLabelValues(route).Inc()
}

// observe records a configuration reload: ok is false when the new
// configuration was refused. restartRequired says whether the file asks
// for changes that only a restart applies.
func (m *reloadMetrics) observe(ok, restartRequired bool) {
	if !ok {
		m.reloads.WithLabelValues("failure").Inc()
		m.lastReload.Set(0)
		return
	}
	m.reloads.WithLabelValues("success").Inc()
	m.lastReload.Set(1)
	m.lastSuccess.SetToCurrentTime()
	if restartRequired {
		m.restart.Set(1)
	} else {
		m.restart.Set(0)
	}
}

// limitsCollector exports the counters the limiters keep themselves
// (limitSet): states dropped to make room, and requests let through because
// the Redis limiter could not decide. Rejections are counted by
// proxy.Metrics from the requests' outcomes.
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

// storeCollector exports what the store's helpers count themselves: the
// resets the epoch watcher saw (0 from the start, for alerts) and the
// releases of claims whose replies were lost.
type storeCollector struct {
	epoch   keystore.EpochReporter // nil: no resets to report
	retrier *keystore.ReleaseRetrier
}

var (
	storeResetsDesc = prometheus.NewDesc("idemgate_store_resets_total",
		"Times the idempotency store was found emptied (its epoch marker vanished: a Redis restart without persistence, a failover to an empty replica, FLUSHALL). Retries of writes claimed before a reset run again.",
		nil, nil)
	claimReleasesPendingDesc = prometheus.NewDesc("idemgate_claim_releases_pending",
		"Claims whose store replies were lost (503 idempotency_unavailable) waiting to be released once the store answers.",
		nil, nil)
	claimReleasesDesc = prometheus.NewDesc("idemgate_claim_releases_total",
		"Claims whose store replies were lost, by result: released (the store answered; the key is free again) or dropped (too many pending, or shutdown came first; the key is held until its lease ends).",
		[]string{"result"}, nil)
)

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- storeResetsDesc
	ch <- claimReleasesPendingDesc
	ch <- claimReleasesDesc
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	var resets uint64
	if c.epoch != nil {
		resets = c.epoch.EpochStatus().Resets
	}
	ch <- prometheus.MustNewConstMetric(storeResetsDesc, prometheus.CounterValue, float64(resets))
	st := c.retrier.Stats()
	ch <- prometheus.MustNewConstMetric(claimReleasesPendingDesc, prometheus.GaugeValue, float64(st.Pending))
	ch <- prometheus.MustNewConstMetric(claimReleasesDesc, prometheus.CounterValue, float64(st.Released), "released")
	ch <- prometheus.MustNewConstMetric(claimReleasesDesc, prometheus.CounterValue, float64(st.Dropped), "dropped")
}

// initRouteSeries makes the per-route series of cfg's routes exist at 0:
// the errors templates' failures and the store's takeovers (idempotent
// routes). The proxy makes its own (proxy.Metrics).
func initRouteSeries(st keystore.Store, rm *reloadMetrics, cfg *config.Config) {
	for _, r := range cfg.Routes {
		rm.errTemplates.WithLabelValues(r.Name)
	}
	ms, ok := st.(interface{ InitRoutes(...string) })
	if !ok {
		return
	}
	var names []string
	for _, r := range cfg.Routes {
		if r.Idempotent {
			names = append(names, r.Name)
		}
	}
	ms.InitRoutes(names...)
}
