package proxy

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/session"
)

// Metrics holds idemgate's Prometheus collectors, registered on a registry
// the caller owns (never the global one), so that two proxies in one process
// (tests) never share a series. Build it with [NewMetrics] and hand it to
// [Options.Metrics], to [Metrics.Store] and to the session queue
// ([Metrics.Session]).
//
// A nil *Metrics records nothing: every method is safe on nil. All methods
// are safe for concurrent use.
//
// Labels are bounded: a route's configured name, an outcome from DESIGN.md's
// list, an HTTP status code, a store operation or a fixed reason. Never a
// key, a client address or a raw path. README.md documents every family.
type Metrics struct {
	requests    *prometheus.CounterVec   // route, outcome, code
	duration    *prometheus.HistogramVec // route
	inFlight    prometheus.Gauge
	upstream    *prometheus.HistogramVec // route
	storeTime   *prometheus.HistogramVec // op
	storeErrs   *prometheus.CounterVec   // op, kind
	limited     *prometheus.CounterVec   // limiter, route
	takeovers   *prometheus.CounterVec   // route
	late        prometheus.Counter
	queueDepth  prometheus.Gauge
	queueWait   *prometheus.HistogramVec // result
	queueReject *prometheus.CounterVec   // reason
	fallbacks   prometheus.Counter
	reloads     *prometheus.CounterVec // result
	lastReload  prometheus.Gauge
	lastSuccess prometheus.Gauge
	restart     prometheus.Gauge
}

// Store operation label values ([Metrics.Store]).
const (
	opReserve       = "reserve"
	opComplete      = "complete"
	opRelease       = "release"
	opRenew         = "renew"
	opGet           = "get"
	opInFlight      = "in_flight"
	opForceRelease  = "force_release"
	opForceComplete = "force_complete"
)

// Limiter label values of idemgate_limiter_rejections_total.
const (
	LimiterEdge  = "edge"
	LimiterRoute = "route"
)

// latencyBuckets suit a proxy: a millisecond to a minute (the default
// upstream timeout). The histograms are also native histograms for servers
// that scrape them (ecosystem.md §4.3); text scrapes get these buckets.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

func histogramOpts(name, help string, buckets []float64) prometheus.HistogramOpts {
	return prometheus.HistogramOpts{
		Name:                            name,
		Help:                            help,
		Buckets:                         buckets,
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  100,
		NativeHistogramMinResetDuration: time.Hour,
	}
}

// NewMetrics creates idemgate's collectors on reg, with an
// idemgate_build_info series for version. It panics if reg already holds
// them (as promauto does): build one Metrics per registry.
func NewMetrics(reg prometheus.Registerer, version string) *Metrics {
	f := promauto.With(reg)
	f.NewGaugeVec(prometheus.GaugeOpts{
		Name: "idemgate_build_info",
		Help: "Always 1; the labels say which build is running.",
	}, []string{"version", "goversion"}).WithLabelValues(version, runtime.Version()).Set(1)
	m := &Metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_http_requests_total",
			Help: "Requests served on the public listener, by route name (\"\" when none matched), outcome (DESIGN.md's list, plus the would_* outcomes of observe mode) and HTTP status code (499: the client hung up first).",
		}, []string{"route", "outcome", "code"}),
		duration: f.NewHistogramVec(histogramOpts(
			"idemgate_http_request_duration_seconds",
			"Time from a request's arrival until its answer was written, by route name.",
			latencyBuckets), []string{"route"}),
		inFlight: f.NewGauge(prometheus.GaugeOpts{
			Name: "idemgate_http_requests_in_flight",
			Help: "Requests on the public listener being served now.",
		}),
		upstream: f.NewHistogramVec(histogramOpts(
			"idemgate_upstream_request_duration_seconds",
			"Time from sending a request upstream until its response headers arrived (or the attempt failed), by route name.",
			latencyBuckets), []string{"route"}),
		storeTime: f.NewHistogramVec(histogramOpts(
			"idemgate_store_operation_duration_seconds",
			"Duration of idempotency store operations, by operation.",
			latencyBuckets), []string{"op"}),
		storeErrs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_store_errors_total",
			Help: "Idempotency store operations that failed (the store was unreachable, full, closed or too slow), by operation and kind; the normal answers (in flight, key reused, lease lost, not found) are not errors.",
		}, []string{"op", "kind"}),
		limited: f.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_limiter_rejections_total",
			Help: "Requests refused with 429 by a limiter (edge or route), by route name (for the edge limiter, the route the request would have matched).",
		}, []string{"limiter", "route"}),
		takeovers: f.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_idempotency_takeovers_total",
			Help: "Claims taken over after the lease of their previous holder ended, by route name.",
		}, []string{"route"}),
		late: f.NewCounter(prometheus.CounterOpts{
			Name: "idemgate_idempotency_late_completions_rejected_total",
			Help: "Answers not stored because the claim had been taken over, released or repaired by an operator while the request ran.",
		}),
		queueDepth: f.NewGauge(prometheus.GaugeOpts{
			Name: "idemgate_session_queue_depth",
			Help: "Requests waiting for their session's turn in this process, over all sessions.",
		}),
		queueWait: f.NewHistogramVec(histogramOpts(
			"idemgate_session_wait_seconds",
			"Time requests waited for their session's turn, by how the wait ended (turn, timeout, canceled).",
			latencyBuckets), []string{"result"}),
		queueReject: f.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_session_rejections_total",
			Help: "Requests refused a session turn (503 session_busy), by reason (queue_full, timeout).",
		}, []string{"reason"}),
		fallbacks: f.NewCounter(prometheus.CounterOpts{
			Name: "idemgate_session_lock_fallbacks_total",
			Help: "Session turns that ran on the local queue alone because the shared lock's store could not be reached.",
		}),
		reloads: f.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_config_reloads_total",
			Help: "Configuration reloads, by result: success (applied, or nothing to apply) or failure (refused; the running configuration kept serving).",
		}, []string{"result"}),
		lastReload: f.NewGauge(prometheus.GaugeOpts{
			Name: "idemgate_config_last_reload_successful",
			Help: "1 if the last configuration reload succeeded (or none was tried), 0 if it was refused.",
		}),
		lastSuccess: f.NewGauge(prometheus.GaugeOpts{
			Name: "idemgate_config_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful configuration load (the start, or a reload).",
		}),
		restart: f.NewGauge(prometheus.GaugeOpts{
			Name: "idemgate_config_restart_required",
			Help: "1 while the configuration file changes keys that only a restart applies (listeners, store, upstream, idempotency, ...).",
		}),
	}
	m.lastReload.Set(1)
	m.lastSuccess.SetToCurrentTime()
	// Series that exist from the start, so that dashboards and alerts see
	// zeros rather than nothing.
	for _, r := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(r)
	}
	return m
}

// countInFlight keeps idemgate_http_requests_in_flight. It runs outside
// the access log, so that when in-flight drops, the request has been
// counted. Without metrics it adds nothing.
func (p *Proxy) countInFlight(next http.Handler) http.Handler {
	m := p.metrics
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.inFlight.Inc()
		defer m.inFlight.Dec()
		next.ServeHTTP(w, r)
	})
}

// observeRequest records a finished request: its outcome, status and
// duration, and a limiter's refusal.
func (m *Metrics) observeRequest(r *http.Request, ex *exchange, status int, outcome string, d time.Duration) {
	if m == nil {
		return
	}
	route := ""
	if ex.route != nil {
		route = ex.route.Name
	}
	m.requests.WithLabelValues(route, outcome, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(d.Seconds())
	if outcome == OutcomeRateLimited {
		limiter := LimiterRoute
		if !ex.pastEdge {
			// Refused before the route was matched: the edge limiter. Name
			// the route the request would have matched.
			limiter = LimiterEdge
			if rt := ex.stages; rt != nil {
				if i, ok := rt.table.Lookup(r.Method, r.URL.EscapedPath()); ok {
					route = rt.routes[i].Name
				}
			}
		}
		m.limited.WithLabelValues(limiter, route).Inc()
	}
}

// ObserveConfigReload records a configuration reload: ok is false when the
// new configuration was refused. restartRequired says whether the file
// asks for changes that only a restart applies.
func (m *Metrics) ObserveConfigReload(ok, restartRequired bool) {
	if m == nil {
		return
	}
	if ok {
		m.reloads.WithLabelValues("success").Inc()
		m.lastReload.Set(1)
		m.lastSuccess.SetToCurrentTime()
		if restartRequired {
			m.restart.Set(1)
		} else {
			m.restart.Set(0)
		}
		return
	}
	m.reloads.WithLabelValues("failure").Inc()
	m.lastReload.Set(0)
}

// Session returns the hooks a session queue calls (session.Options.Metrics):
// queue depth, waits, refusals and fallbacks to the local queue. It is
// [session.NopMetrics] when m is nil.
func (m *Metrics) Session() session.Metrics {
	if m == nil {
		return session.NopMetrics{}
	}
	return sessionMetrics{m}
}

// sessionMetrics adapts Metrics to [session.Metrics].
type sessionMetrics struct{ m *Metrics }

var _ session.Metrics = sessionMetrics{}

func (s sessionMetrics) Waiting(delta int) { s.m.queueDepth.Add(float64(delta)) }
func (s sessionMetrics) Waited(d time.Duration, r session.Result) {
	s.m.queueWait.WithLabelValues(string(r)).Observe(d.Seconds())
}
func (s sessionMetrics) Rejected(r session.Result) { s.m.queueReject.WithLabelValues(string(r)).Inc() }
func (s sessionMetrics) Fallback()                 { s.m.fallbacks.Inc() }

// transport wraps rt so that each upstream attempt's time to response
// headers is observed, by the route of the request it carries.
func (m *Metrics) transport(rt http.RoundTripper) http.RoundTripper {
	if m == nil {
		return rt
	}
	return &meteredTransport{next: rt, m: m}
}

type meteredTransport struct {
	next http.RoundTripper
	m    *Metrics
}

func (t *meteredTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	res, err := t.next.RoundTrip(req)
	route := ""
	// The outbound request's context derives from the inbound one, which
	// carries the exchange.
	if ex := exchangeOf(req); ex != nil && ex.route != nil {
		route = ex.route.Name
	}
	t.m.upstream.WithLabelValues(route).Observe(time.Since(start).Seconds())
	return res, err
}

// CloseIdleConnections lets ReverseProxy's owner close the wrapped
// Transport's idle connections.
func (t *meteredTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// Store returns s with every operation timed and its failures counted, and
// with claim takeovers and rejected late completions counted. The result
// also implements [keystore.Admin] by forwarding to s (whose admin
// operations are timed as well); when s does not implement it, those
// methods fail. On a nil m the operations are only forwarded.
func (m *Metrics) Store(s keystore.Store) *MeteredStore {
	ms := &MeteredStore{inner: s, m: m}
	ms.admin, _ = s.(keystore.Admin)
	return ms
}

// MeteredStore is a [keystore.Store] and [keystore.Admin] that records
// [Metrics] about the store it wraps. Build it with [Metrics.Store]. It is
// safe for concurrent use when the wrapped store is.
type MeteredStore struct {
	inner keystore.Store
	admin keystore.Admin // nil when inner is not one
	m     *Metrics
}

var (
	_ keystore.Store = (*MeteredStore)(nil)
	_ keystore.Admin = (*MeteredStore)(nil)
)

// errNoAdmin is returned by the admin methods of a MeteredStore whose store
// has none.
var errNoAdmin = errors.New("proxy: the store has no admin operations")

// Unwrap returns the wrapped store.
func (s *MeteredStore) Unwrap() keystore.Store { return s.inner }

// done records one operation's duration and, for a failure, its kind.
func (s *MeteredStore) done(op string, start time.Time, err error) {
	m := s.m
	if m == nil {
		return
	}
	m.storeTime.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if kind := errorKind(err); kind != "" {
		m.storeErrs.WithLabelValues(op, kind).Inc()
	}
}

// errorKind classifies a store error for idemgate_store_errors_total: ""
// for success and for the answers that are part of normal operation.
func errorKind(err error) string {
	switch {
	case err == nil,
		errors.Is(err, keystore.ErrNotFound),
		errors.Is(err, keystore.ErrInFlight),
		errors.Is(err, keystore.ErrFingerprintMismatch),
		errors.Is(err, keystore.ErrLeaseLost):
		return ""
	case errors.Is(err, keystore.ErrFull):
		return "full"
	case errors.Is(err, keystore.ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "unavailable"
}

// Reserve implements [keystore.Store].
func (s *MeteredStore) Reserve(ctx context.Context, k keystore.Key, opts keystore.ReserveOptions) (keystore.Reservation, error) {
	start := time.Now()
	res, err := s.inner.Reserve(ctx, k, opts)
	s.done(opReserve, start, err)
	if err == nil && res.Takeover && s.m != nil {
		s.m.takeovers.WithLabelValues(opts.Route).Inc()
	}
	return res, err
}

// Complete implements [keystore.Store].
func (s *MeteredStore) Complete(ctx context.Context, k keystore.Key, token uint64, resp *keystore.Response) error {
	start := time.Now()
	err := s.inner.Complete(ctx, k, token, resp)
	s.done(opComplete, start, err)
	if s.m != nil && (errors.Is(err, keystore.ErrLeaseLost) || errors.Is(err, keystore.ErrNotFound)) {
		s.m.late.Inc()
	}
	return err
}

// Release implements [keystore.Store].
func (s *MeteredStore) Release(ctx context.Context, k keystore.Key, token uint64) error {
	start := time.Now()
	err := s.inner.Release(ctx, k, token)
	s.done(opRelease, start, err)
	return err
}

// Renew implements [keystore.Store].
func (s *MeteredStore) Renew(ctx context.Context, k keystore.Key, token uint64, lease time.Duration) (time.Time, error) {
	start := time.Now()
	end, err := s.inner.Renew(ctx, k, token, lease)
	s.done(opRenew, start, err)
	return end, err
}

// Get implements [keystore.Store].
func (s *MeteredStore) Get(ctx context.Context, k keystore.Key) (keystore.Record, error) {
	start := time.Now()
	rec, err := s.inner.Get(ctx, k)
	s.done(opGet, start, err)
	return rec, err
}

// Close implements [keystore.Store]: it closes the wrapped store.
func (s *MeteredStore) Close() error { return s.inner.Close() }

// InFlight implements [keystore.Admin].
func (s *MeteredStore) InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]keystore.Record, error) {
	if s.admin == nil {
		return nil, errNoAdmin
	}
	start := time.Now()
	recs, err := s.admin.InFlight(ctx, olderThan, limit)
	s.done(opInFlight, start, err)
	return recs, err
}

// ForceRelease implements [keystore.Admin].
func (s *MeteredStore) ForceRelease(ctx context.Context, k keystore.Key) error {
	if s.admin == nil {
		return errNoAdmin
	}
	start := time.Now()
	err := s.admin.ForceRelease(ctx, k)
	s.done(opForceRelease, start, err)
	return err
}

// ForceComplete implements [keystore.Admin].
func (s *MeteredStore) ForceComplete(ctx context.Context, k keystore.Key, resp *keystore.Response) error {
	if s.admin == nil {
		return errNoAdmin
	}
	start := time.Now()
	err := s.admin.ForceComplete(ctx, k, resp)
	s.done(opForceComplete, start, err)
	return err
}
