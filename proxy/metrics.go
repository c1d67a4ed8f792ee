package proxy

import (
	"net/http"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/idemgate/idemgate/internal/latency"
	"github.com/idemgate/idemgate/session"
)

// Metrics holds the pipeline's Prometheus collectors, registered on a
// registry the caller owns (never the global one), so that two proxies in
// one process (tests) never share a series. Build it with [NewMetrics] and
// hand it to [Options.Metrics] and to the session queue ([Metrics.Session]).
// The store's metrics are keystore/metered's.
//
// A nil *Metrics records nothing: every method is safe on nil. All methods
// are safe for concurrent use.
//
// Labels are bounded: a route's configured name, an outcome from DESIGN.md's
// list, an HTTP status code or a fixed reason. Never a
// key, a client address or a raw path. README.md documents every family.
type Metrics struct {
	requests    *prometheus.CounterVec   // route, outcome, code
	duration    *prometheus.HistogramVec // route
	inFlight    prometheus.Gauge
	upstream    *prometheus.HistogramVec // route
	limited     *prometheus.CounterVec   // limiter, route
	queueDepth  prometheus.Gauge
	queueWait   *prometheus.HistogramVec // result
	queueReject *prometheus.CounterVec   // reason
	fallbacks   prometheus.Counter
}

// Limiter label values of idemgate_limiter_rejections_total.
const (
	LimiterEdge  = "edge"
	LimiterRoute = "route"
)

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
		duration: f.NewHistogramVec(latency.HistogramOpts(
			"idemgate_http_request_duration_seconds",
			"Time from a request's arrival until its answer was written, by route name."), []string{"route"}),
		inFlight: f.NewGauge(prometheus.GaugeOpts{
			Name: "idemgate_http_requests_in_flight",
			Help: "Requests on the public listener being served now.",
		}),
		upstream: f.NewHistogramVec(latency.HistogramOpts(
			"idemgate_upstream_request_duration_seconds",
			"Time from sending a request upstream until its response headers arrived (or the attempt failed), by route name."), []string{"route"}),
		limited: f.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_limiter_rejections_total",
			Help: "Requests refused with 429 by a limiter (edge or route), by route name (for the edge limiter, the route the request would have matched).",
		}, []string{"limiter", "route"}),
		queueDepth: f.NewGauge(prometheus.GaugeOpts{
			Name: "idemgate_session_queue_depth",
			Help: "Requests waiting for their session's turn in this process, over all sessions.",
		}),
		queueWait: f.NewHistogramVec(latency.HistogramOpts(
			"idemgate_session_wait_seconds",
			"Time requests waited for their session's turn, by how the wait ended (turn, timeout, canceled)."), []string{"result"}),
		queueReject: f.NewCounterVec(prometheus.CounterOpts{
			Name: "idemgate_session_rejections_total",
			Help: "Requests refused a session turn (503 session_busy), by reason (queue_full, timeout).",
		}, []string{"reason"}),
		fallbacks: f.NewCounter(prometheus.CounterOpts{
			Name: "idemgate_session_lock_fallbacks_total",
			Help: "Session turns that ran on the local queue alone because the shared lock's store could not be reached.",
		}),
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
				if m, ok, _ := rt.table.Match(r.Method, r.URL.EscapedPath()); ok {
					route = rt.routes[m.Index].Name
				}
			}
		}
		m.limited.WithLabelValues(limiter, route).Inc()
	}
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
