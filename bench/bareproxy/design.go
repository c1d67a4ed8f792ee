package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// designFloor (-design) is the bare proxy plus the work DESIGN.md asks of
// every request, each item written plainly and once, and nothing else of
// idemgate (issue 31): it answers whether a throughput target measured
// against the bare proxy can be met by any proxy that does that work.
//
// Every request: its request id (read when valid, else made from a
// process prefix and a counter), the client's address parsed, the
// X-Forwarded-* headers appended (ReverseProxy's SetXForwarded), a bound
// on the wait for response headers (a cancel context and a timer), one
// JSON access-log line written through a buffer flushed every 100 ms (as
// idemgate's --log-flush), a request counter and a duration histogram.
//
// A POST with an Idempotency-Key also: the key checked, the body read
// whole, the key (scoped to the client's Authorization header, idemgate's
// default identity) and the fingerprint hashed (SHA-256), a claim put in a
// map under a mutex (the key claimed already answers 409), a lease timer
// armed and stopped, the whole answer read, kept in the map with its
// status and headers (one byte slice), and sent on.
//
// What it leaves out, though DESIGN asks for it: limits (off in the
// benchmarks' config), sessions, replays, the late answer wait's detached
// call, the claim id, store metrics, tracing, panic recovery, the policy
// snapshot, hardening of request heads.
//
// The caller flushes the log (flushLog) every 100 ms, as idemgate's
// --log-flush does.
func designFloor(rp *httputil.ReverseProxy, target *url.URL, logOut io.Writer, reg prometheus.Registerer) *design {
	d := &design{rp: rp, log: bufio.NewWriterSize(logOut, 64<<10), claims: make(map[[32]byte][]byte)}
	d.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floor_requests_total"}, []string{"route", "method", "outcome", "code"})
	d.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "floor_request_duration_seconds"}, []string{"route", "outcome"})
	reg.MustRegister(d.requests, d.duration)
	d.prefix = strconv.FormatInt(time.Now().UnixNano()&0xffffffffffff, 16)
	rp.Rewrite = func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.Out.Host = pr.In.Host
		pr.SetXForwarded()
	}
	rp.ModifyResponse = d.modifyResponse
	return d
}

// flushLog writes the access-log lines buffered so far.
func (d *design) flushLog() error {
	d.logMu.Lock()
	defer d.logMu.Unlock()
	return d.log.Flush()
}

type design struct {
	rp       *httputil.ReverseProxy
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	prefix   string
	seq      atomic.Uint64

	logMu sync.Mutex
	log   *bufio.Writer

	mu     sync.Mutex
	claims map[[32]byte][]byte // the answer, encoded; nil while claimed
}

// answer is a claim's slot in the map, found again by the upstream call.
type answer struct{ key [32]byte }

// statusWriter counts what went to the client.
type statusWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

type claimKey struct{}

func (d *design) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id := r.Header.Get("X-Request-Id")
	if !validID(id) {
		id = d.prefix + "-" + strconv.FormatUint(d.seq.Add(1), 36)
		r.Header.Set("X-Request-Id", id)
	}
	client := ""
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		client = ap.Addr().String()
	}
	sw := &statusWriter{ResponseWriter: w}
	sw.Header().Set("X-Request-Id", id)
	route, outcome := "", "passthrough"
	if key := r.Header.Get("Idempotency-Key"); r.Method == http.MethodPost && key != "" {
		route, outcome = "orders", d.keyed(sw, r, key)
	} else {
		ctx, cancel := context.WithCancel(r.Context())
		t := time.AfterFunc(30*time.Second, cancel)
		d.rp.ServeHTTP(sw, r.WithContext(ctx))
		t.Stop()
		cancel()
	}
	took := time.Since(start)
	code := strconv.Itoa(sw.status)
	d.requests.WithLabelValues(route, r.Method, outcome, code).Inc()
	d.duration.WithLabelValues(route, outcome).Observe(took.Seconds())
	d.logLine(start, r, route, sw, outcome, took, client, id)
}

// keyed runs a keyed write and returns its outcome.
func (d *design) keyed(w http.ResponseWriter, r *http.Request, key string) string {
	if len(key) > 255 || !validID(key) {
		http.Error(w, "bad key", http.StatusBadRequest)
		return "rejected"
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return "rejected"
	}
	// The key scoped to the route and the client's identity (its
	// Authorization header, as idemgate's default identity).
	var arr [512]byte
	auth := r.Header.Get("Authorization")
	b := binary.BigEndian.AppendUint64(arr[:0], uint64(len(auth)))
	b = binary.BigEndian.AppendUint64(append(b, auth...), uint64(len(key)))
	b = append(append(b, "orders"...), key...)
	k := sha256.Sum256(b)
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte(r.URL.EscapedPath()))
	h.Write([]byte(r.URL.RawQuery))
	h.Write(body)
	var fp [32]byte
	h.Sum(fp[:0])
	_ = fp
	a := &answer{key: k}
	d.mu.Lock()
	if _, ok := d.claims[k]; ok {
		d.mu.Unlock()
		http.Error(w, "in progress", http.StatusConflict)
		return "in_progress"
	}
	d.claims[k] = nil
	d.mu.Unlock()
	lease := time.AfterFunc(10*time.Second, func() {})
	defer lease.Stop()
	r.Body = io.NopCloser(bytes.NewReader(body))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
	defer cancel()
	d.rp.ServeHTTP(w, r.WithContext(context.WithValue(ctx, claimKey{}, a)))
	return "executed"
}

func (d *design) modifyResponse(res *http.Response) error {
	a, ok := res.Request.Context().Value(claimKey{}).(*answer)
	if !ok {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	res.Body.Close()
	if err != nil {
		return err
	}
	// One allocation: the status, the header block and the body.
	var kept bytes.Buffer
	kept.Grow(len(b) + 512)
	kept.WriteString(strconv.Itoa(res.StatusCode))
	kept.WriteString("\r\n")
	res.Header.Write(&kept)
	kept.WriteString("\r\n")
	kept.Write(b)
	d.mu.Lock()
	d.claims[a.key] = kept.Bytes()
	d.mu.Unlock()
	res.Body = io.NopCloser(bytes.NewReader(b))
	return nil
}

func (d *design) logLine(start time.Time, r *http.Request, route string, sw *statusWriter, outcome string, took time.Duration, client, id string) {
	var arr [512]byte
	b := append(arr[:0], `{"time":"`...)
	b = start.UTC().AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","level":"INFO","msg":"request","component":"proxy","host":`...)
	b = strconv.AppendQuote(b, r.Host)
	b = append(b, `,"method":`...)
	b = strconv.AppendQuote(b, r.Method)
	b = append(b, `,"path":`...)
	b = strconv.AppendQuote(b, r.URL.EscapedPath())
	b = append(b, `,"route":`...)
	b = strconv.AppendQuote(b, route)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(sw.status), 10)
	b = append(b, `,"code":"","outcome":`...)
	b = strconv.AppendQuote(b, outcome)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendFloat(b, float64(took.Microseconds())/1000, 'f', -1, 64)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, sw.n, 10)
	b = append(b, `,"client":`...)
	b = strconv.AppendQuote(b, client)
	b = append(b, `,"request_id":`...)
	b = strconv.AppendQuote(b, id)
	b = append(b, "}\n"...)
	d.logMu.Lock()
	d.log.Write(b)
	d.logMu.Unlock()
}

// validID reports whether s is 1–200 visible ASCII characters.
func validID(s string) bool {
	if len(s) == 0 || len(s) > 200 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
