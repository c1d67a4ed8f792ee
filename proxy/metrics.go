package proxy

import (
	"maps"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/idemgate/idemgate/internal/metric"
	"github.com/idemgate/idemgate/keystore"
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
	noRoute     *routeSeries             // the series of requests no route matched (route "")
	requests    *prometheus.CounterVec   // route, outcome, code
	duration    *prometheus.HistogramVec // route, result
	inFlight    prometheus.Gauge
	upstream    *prometheus.HistogramVec // route
	upstreamN   *prometheus.CounterVec   // route, code
	claims      prometheus.Gauge
	limited     *prometheus.CounterVec // limiter, route
	queueDepth  prometheus.Gauge
	queueWait   *prometheus.HistogramVec // result
	queueReject *prometheus.CounterVec   // reason
	fallbacks   prometheus.Counter
	lateKept    prometheus.Gauge
	lateDrop    *prometheus.CounterVec // route
	unknowns    *prometheus.CounterVec // route, cause
	probes      *prometheus.CounterVec // route, result (reconcile.go)
}

// Limiter label values of idemgate_limiter_rejections_total.
const (
	LimiterEdge  = "edge"
	LimiterRoute = "route"
)

// Result label values of idemgate_http_request_duration_seconds: how the
// request ended, a bounded summary of its outcome, so that latency can be
// read apart for answers the upstream made, replays, refusals and failures.
const (
	ResultForwarded = "forwarded" // the upstream answered (passthrough, executed, released, unprotected, would_*)
	ResultReplayed  = "replayed"  // a stored answer was replayed
	ResultRefused   = "refused"   // idemgate answered itself: a 4xx or 503 problem
	ResultFailed    = "failed"    // the upstream failed (upstream_error) or idemgate did (500)
	ResultCanceled  = "canceled"  // the client hung up first (logged as 499)
)

var results = [...]string{ResultForwarded, ResultReplayed, ResultRefused, ResultFailed, ResultCanceled}

// UpstreamCodeError is the code label of idemgate_upstream_requests_total for
// an attempt that got no response (refused, timed out, broken).
const UpstreamCodeError = "error"

// NewMetrics creates idemgate's collectors on reg, with an
// idemgate_build_info series for version and revision (the VCS commit,
// "" when unknown). It panics if reg already holds them (as promauto
// does): build one Metrics per registry.
func NewMetrics(reg prometheus.Registerer, version, revision string) *Metrics {
	f := promauto.With(reg)
	metric.GaugeVec(f, "idemgate_build_info",
		"Always 1; the labels say which build is running (version, Go version, VCS revision).",
		"version", "goversion", "revision").WithLabelValues(version, runtime.Version(), revision).Set(1)
	m := &Metrics{
		requests: metric.CounterVec(f, "idemgate_http_requests_total",
			"Requests served on the public listener, by route name (\"\" when none matched), outcome (DESIGN.md's list, plus the would_* outcomes of observe mode) and HTTP status code (499: the client hung up first).", "route", "outcome", "code"),
		duration: metric.Latency(f, "idemgate_http_request_duration_seconds",
			"Time from a request's arrival until its answer was written, by route name and result (forwarded, replayed, refused, failed, canceled).", "route", "result"),
		inFlight: metric.Gauge(f, "idemgate_http_requests_in_flight",
			"Requests on the public listener being served now."),
		upstream: metric.Latency(f, "idemgate_upstream_request_duration_seconds",
			"Time from sending a request upstream until its response headers arrived (or the attempt failed), by route name.", "route"),
		upstreamN: metric.CounterVec(f, "idemgate_upstream_requests_total",
			"Requests sent upstream, by route name and the upstream's HTTP status code (\"error\": no response: refused, timed out or broken).", "route", "code"),
		claims: metric.Gauge(f, "idemgate_claims_in_flight",
			"Keys this process holds a claim on now: keyed writes running under their claim."),
		limited: metric.CounterVec(f, "idemgate_limiter_rejections_total",
			"Requests refused with 429 by a limiter (edge or route), by route name (for the edge limiter, the route the request would have matched).", "limiter", "route"),
		queueDepth: metric.Gauge(f, "idemgate_session_queue_depth",
			"Requests waiting for their session's turn in this process, over all sessions."),
		queueWait: metric.Latency(f, "idemgate_session_wait_seconds",
			"Time requests waited for their session's turn, by how the wait ended (turn, timeout, canceled).", "result"),
		queueReject: metric.CounterVec(f, "idemgate_session_rejections_total",
			"Requests refused a session turn (503 session_busy), by reason (queue_full, timeout).", "reason"),
		fallbacks: metric.Counter(f, "idemgate_session_lock_fallbacks_total",
			"Session turns that ran on the local queue alone because the shared lock's store could not be reached."),
		lateKept: metric.Gauge(f, "idemgate_late_calls_kept",
			"Keyed writes whose client got 504 upstream_timeout and whose upstream call runs on for its late answer (late_answer_wait), in this process."),
		lateDrop: metric.CounterVec(f, "idemgate_late_calls_cancelled_total",
			"Keyed writes cancelled at their timeout because late_answer_max calls were kept already, by route name.", "route"),
		unknowns: metric.CounterVec(f, "idemgate_unknown_outcomes_total",
			"Keyed writes on unknown_outcome: hold routes whose outcome became unknown and that are held until resolved, by route name and cause (broken, late_timeout, lapsed, shutdown).", "route", "cause"),
		probes: metric.CounterVec(f, "idemgate_reconcile_probes_total",
			"Reconcile probes of unknown records, by route name and result (found, absent, released, denied, other, error, lost).", "route", "result"),
	}
	// Series that exist from the start, so that rate() sees the first
	// event. The routes' series are made by initRoutes.
	for _, r := range []session.Result{session.ResultTurn, session.ResultTimeout, session.ResultCanceled} {
		m.queueWait.WithLabelValues(string(r))
	}
	for _, r := range []session.Result{session.ResultFull, session.ResultTimeout} {
		m.queueReject.WithLabelValues(string(r))
	}
	m.initRoute("", false, false, 0)
	m.noRoute = m.newRouteSeries("")
	return m
}

// initRoutes makes the series the routes of st (compiled into rs) can
// produce, at 0: per route, the results of the request histogram and the
// outcomes whose status is known in advance (the problems the route's
// stages can answer), and the limiters' rejections. Series of routes a
// reload removed stay.
func (m *Metrics) initRoutes(rs []*route, st Policy) {
	if m == nil {
		return
	}
	for _, r := range rs {
		limited := st.Edge != nil || st.RouteLimits[r.Name] != nil
		m.initRoute(r.Name, r.Idempotent, limited, r.reuseStatus)
		r.series = m.newRouteSeries(r.Name)
		if r.probe != nil {
			for _, res := range keystore.ProbeResults {
				m.probes.WithLabelValues(r.Name, res)
			}
		}
		if r.Session != (Session{}) && st.Sessions != nil {
			m.requests.WithLabelValues(r.Name, OutcomeSessionBusy, "503")
		}
		if st.Edge != nil {
			m.limited.WithLabelValues(LimiterEdge, r.Name)
		}
		if st.RouteLimits[r.Name] != nil {
			m.limited.WithLabelValues(LimiterRoute, r.Name)
		}
	}
	if st.Edge != nil {
		m.limited.WithLabelValues(LimiterEdge, "")
		m.requests.WithLabelValues("", OutcomeRateLimited, "429")
	}
}

// initRoute makes one route's series (see initRoutes).
func (m *Metrics) initRoute(name string, idempotent, limited bool, reuseStatus int) {
	for _, res := range results {
		m.duration.WithLabelValues(name, res)
	}
	m.upstream.WithLabelValues(name)
	if idempotent {
		m.lateDrop.WithLabelValues(name)
		for _, c := range keystore.Causes {
			m.unknowns.WithLabelValues(name, c.String())
		}
	}
	m.upstreamN.WithLabelValues(name, UpstreamCodeError)
	for _, pr := range []proxyProblem{problemUpstreamDown, problemUpstreamTimeout} {
		m.requests.WithLabelValues(name, pr.outcome, statusLabel(pr.Status))
	}
	if limited {
		m.requests.WithLabelValues(name, OutcomeRateLimited, "429")
	}
	if !idempotent {
		return
	}
	for _, pr := range []proxyProblem{problemKeyInvalid, problemRequestTooLarge, problemInProgress, problemResponseTooLarge, problemUnavailable} {
		m.requests.WithLabelValues(name, pr.outcome, statusLabel(pr.Status))
	}
	if reuseStatus != 0 {
		m.requests.WithLabelValues(name, OutcomeKeyReused, statusLabel(reuseStatus))
	}
}

// routeSeries are one route's series of the request counter, the
// duration histogram and the upstream's, looked up once instead of per
// request (issue 31: WithLabelValues hashes and checks every label value
// on each call). The vectors never delete a series, so a series kept here
// is the one WithLabelValues would return. Safe for concurrent use.
type routeSeries struct {
	route     string
	durations [len(results)]prometheus.Observer // by result, as in results
	upstream  prometheus.Observer               // the upstream's time to headers
	// requests are the counters by outcome and status; upstreamN the
	// upstream attempts' by status (-1: no response, code "error").
	requests  seriesCache[requestSeries]
	upstreamN seriesCache[int]
}

// seriesCache maps part of a series' labels to its counter, copied on
// write: a request reads it without a lock; the keys a route sees are few
// (its outcomes times the statuses its upstream answers).
type seriesCache[K comparable] struct {
	m  atomic.Pointer[map[K]prometheus.Counter]
	mu sync.Mutex // serializes the writers
}

// get returns k's counter, made by newSeries the first time.
func (c *seriesCache[K]) get(k K, newSeries func() prometheus.Counter) prometheus.Counter {
	if p := c.m.Load(); p != nil {
		if s, ok := (*p)[k]; ok {
			return s
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[K]prometheus.Counter
	if p := c.m.Load(); p != nil {
		if s, ok := (*p)[k]; ok {
			return s
		}
		old = *p
	}
	s := newSeries()
	next := maps.Clone(old)
	if next == nil {
		next = map[K]prometheus.Counter{}
	}
	next[k] = s
	c.m.Store(&next)
	return s
}

// requestSeries is the part of a request counter's labels beside the route.
type requestSeries struct {
	outcome string
	status  int
}

func (m *Metrics) newRouteSeries(route string) *routeSeries {
	s := &routeSeries{route: route, upstream: m.upstream.WithLabelValues(route)}
	for i, res := range results {
		s.durations[i] = m.duration.WithLabelValues(route, res)
	}
	return s
}

// counter returns the route's request counter of outcome and status.
func (s *routeSeries) counter(m *Metrics, outcome string, status int) prometheus.Counter {
	return s.requests.get(requestSeries{outcome, status}, func() prometheus.Counter {
		return m.requests.WithLabelValues(s.route, outcome, statusLabel(status))
	})
}

// upstreamCounter returns the route's upstream attempt counter of status,
// -1 for an attempt without a response.
func (s *routeSeries) upstreamCounter(m *Metrics, status int) prometheus.Counter {
	return s.upstreamN.get(status, func() prometheus.Counter {
		return m.upstreamN.WithLabelValues(s.route, upstreamCode(status))
	})
}

// duration returns the route's duration histogram of result (one of
// results).
func (s *routeSeries) duration(m *Metrics, result string) prometheus.Observer {
	for i, res := range results {
		if res == result {
			return s.durations[i]
		}
	}
	return m.duration.WithLabelValues(s.route, result)
}

// resultOf is the result label of a request that ended with outcome, status
// and problem code ("" when the upstream answered).
func resultOf(outcome, code string, status int) string {
	switch {
	case status == statusClientClosed:
		return ResultCanceled
	case outcome == OutcomeReplayed:
		return ResultReplayed
	case outcome == OutcomeUpstreamError, outcome == OutcomeLate, code == problemInternal.Code:
		return ResultFailed
	case outcome == OutcomePassthrough, outcome == OutcomeExecuted, outcome == OutcomeReleased,
		outcome == OutcomeUnprotected, strings.HasPrefix(outcome, "would_"):
		return ResultForwarded
	}
	return ResultRefused
}

// lateHeld adds delta to idemgate_late_calls_kept.
func (m *Metrics) lateHeld(delta float64) {
	if m != nil {
		m.lateKept.Add(delta)
	}
}

// unknownOutcome counts an unknown outcome.
func (m *Metrics) unknownOutcome(route string, cause keystore.Cause) {
	if m != nil {
		m.unknowns.WithLabelValues(route, cause.String()).Inc()
	}
}

// reconcileProbe counts a reconcile probe by its result.
func (m *Metrics) reconcileProbe(route, result string) {
	if m != nil {
		m.probes.WithLabelValues(route, result).Inc()
	}
}

// lateDropped counts a call cancelled at its timeout because
// late_answer_max calls were kept already.
func (m *Metrics) lateDropped(route string) {
	if m != nil {
		m.lateDrop.WithLabelValues(route).Inc()
	}
}

// claimHeld adds delta to idemgate_claims_in_flight.
func (m *Metrics) claimHeld(delta float64) {
	if m != nil {
		m.claims.Add(delta)
	}
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
	route, s := "", m.noRoute // requests no route matched
	if ex.route != nil {
		route, s = ex.route.Name, ex.route.series // nil: a route Apply did not see
	}
	if s != nil {
		s.counter(m, outcome, status).Inc()
		s.duration(m, resultOf(outcome, ex.code, status)).Observe(d.Seconds())
	} else {
		m.requests.WithLabelValues(route, outcome, statusLabel(status)).Inc()
		m.duration.WithLabelValues(route, resultOf(outcome, ex.code, status)).Observe(d.Seconds())
	}
	if outcome == OutcomeRateLimited {
		limiter := LimiterRoute
		if !ex.pastEdge {
			// Refused before the route was matched: the edge limiter. Name
			// the route the request would have matched.
			limiter = LimiterEdge
			if rt := ex.snap; rt != nil {
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
	took := time.Since(start)
	route, s := "", t.m.noRoute
	// The outbound request's context derives from the inbound one, which
	// carries the exchange.
	if ex := exchangeOf(req); ex != nil && ex.route != nil {
		route, s = ex.route.Name, ex.route.series // nil: a route Apply did not see
	}
	status := -1 // no response
	if err == nil {
		status = res.StatusCode
	}
	if s != nil {
		s.upstream.Observe(took.Seconds())
		s.upstreamCounter(t.m, status).Inc()
	} else {
		t.m.upstream.WithLabelValues(route).Observe(took.Seconds())
		t.m.upstreamN.WithLabelValues(route, upstreamCode(status)).Inc()
	}
	return res, err
}

// upstreamCode is the code label of an upstream attempt answered with
// status, -1 for none.
func upstreamCode(status int) string {
	if status < 0 {
		return UpstreamCodeError
	}
	return statusLabel(status)
}

// statusLabels are the metric labels of the statuses 0–599, made once:
// strconv.Itoa allocates for every number from 100 up, and every request
// labels one or two statuses (issue 31: allocation on the hot path).
var statusLabels = func() (l [600]string) {
	for i := range l {
		l[i] = strconv.Itoa(i)
	}
	return l
}()

// statusLabel is strconv.Itoa(code), without allocating for 0–599.
func statusLabel(code int) string {
	if code >= 0 && code < len(statusLabels) {
		return statusLabels[code]
	}
	return strconv.Itoa(code)
}

// CloseIdleConnections lets ReverseProxy's owner close the wrapped
// Transport's idle connections.
func (t *meteredTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
