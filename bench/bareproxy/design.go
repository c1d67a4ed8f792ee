package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// designFloor (-design) is the bare proxy plus the work DESIGN.md asks of
// every request, each item written plainly and once, and nothing else of
// idemgate (issue 31): it answers whether a throughput target measured
// against the bare proxy can be met by any proxy that does that work.
//
// Every request: its request id (read when 1–200 visible ASCII, else made
// from a process prefix and a counter; forwarded, and answered unless the
// upstream's answer has its own), the client's address parsed, the route
// matched (a ServeMux of the keyed routes' patterns), the X-Forwarded-*
// headers appended (ReverseProxy's SetXForwarded), the upstream's wait
// bounded (a cancel context and a timer), one JSON access-log line
// written through a buffer the caller flushes every 100 ms (flushLog, as
// idemgate's --log-flush), a request counter and a duration histogram.
//
// A keyed write (a route's request with an Idempotency-Key) also: the key
// checked (one header, 1–255 visible ASCII), the body read whole (413 over
// 1 MiB), the key scoped to the route and the client's Authorization
// header (idemgate's default identity) and hashed, the fingerprint hashed
// (method, path, query, a JSON body in canonical form), a claim taken (a
// key claimed already answers 409; in a map under a mutex, or with
// -redis in Redis: SET NX, as the floor's), a lease timer
// armed and stopped, Accept-Encoding removed, a deadline detached from the
// client's, the whole answer read (up to 64 KiB; a larger one is marked
// and streamed on), kept in the map as one byte slice (status,
// fingerprint, header block, body; with -redis one SET XX), and sent on;
// a key left without an answer is freed.
//
// What it leaves out, though DESIGN asks for it: limits (off in the
// benchmarks' configs), sessions, replays, the late answer wait's
// detached call, claim ids, keeping a key whose upstream broke, store
// metrics, tracing, panic recovery, policy snapshots, the hardening of
// request heads, path normalization beyond ServeMux's.
func designFloor(rp *httputil.ReverseProxy, target *url.URL, logOut io.Writer, reg prometheus.Registerer, c claims) *design {
	d := &design{rp: rp, log: bufio.NewWriterSize(logOut, 64<<10), claims: c, routes: http.NewServeMux()}
	// The keyed routes of both harnesses' configs (bench-wrk's and
	// bench/driver's).
	for _, pattern := range []string{"POST /orders", "POST /ucp/v1/carts"} {
		d.routes.Handle(pattern, http.NotFoundHandler())
	}
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
	routes   *http.ServeMux // the idempotent routes, by pattern
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	prefix   string
	seq      atomic.Uint64

	logMu sync.Mutex
	log   *bufio.Writer

	claims claims
}

// answer is a claim's key and fingerprint, found again by the upstream
// call, and whether its answer was kept.
type answer struct {
	key  [32]byte
	fp   [32]byte
	kept bool
}

// claims is where the design floor keeps its claims and answers: a map in
// memory ([memClaims]) or Redis ([redisClaims]), as idemgate's two stores.
type claims interface {
	// claim takes k, and reports false when k is claimed or answered
	// already.
	claim(ctx context.Context, k [32]byte) (bool, error)
	// keep stores k's answer, or the mark of one too large to keep.
	keep(ctx context.Context, k [32]byte, b []byte) error
	// free gives k back: no answer was kept.
	free(ctx context.Context, k [32]byte)
}

// memClaims keeps the claims in a map under a mutex: the answer, encoded,
// or nil while claimed.
type memClaims struct {
	mu sync.Mutex
	m  map[[32]byte][]byte
}

func newMemClaims() *memClaims { return &memClaims{m: make(map[[32]byte][]byte)} }

func (c *memClaims) claim(_ context.Context, k [32]byte) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		return false, nil
	}
	c.m[k] = nil
	return true, nil
}

func (c *memClaims) keep(_ context.Context, k [32]byte, b []byte) error {
	c.mu.Lock()
	c.m[k] = b
	c.mu.Unlock()
	return nil
}

func (c *memClaims) free(_ context.Context, k [32]byte) {
	c.mu.Lock()
	delete(c.m, k)
	c.mu.Unlock()
}

// redisClaims keeps the claims in Redis (-design -redis), with the floor's
// two calls (see floor in main.go): a claim is SET NX with the lease, an
// answer SET XX with the retention; a key freed is deleted (a third call,
// made only when the upstream gave no answer).
type redisClaims struct {
	rdb    *redis.Client
	prefix string
}

func (c *redisClaims) name(k [32]byte) string { return c.prefix + string(k[:]) }

func (c *redisClaims) claim(ctx context.Context, k [32]byte) (bool, error) {
	err := c.rdb.SetArgs(ctx, c.name(k), "", redis.SetArgs{Mode: "NX", TTL: lease}).Err()
	if err == redis.Nil {
		return false, nil
	}
	return err == nil, err
}

func (c *redisClaims) keep(ctx context.Context, k [32]byte, b []byte) error {
	return c.rdb.SetArgs(ctx, c.name(k), b, redis.SetArgs{Mode: "XX", TTL: retention}).Err()
}

func (c *redisClaims) free(ctx context.Context, k [32]byte) { c.rdb.Del(ctx, c.name(k)) }

// statusWriter counts what went to the client, and answers with the
// request id unless the upstream's answer carries its own.
type statusWriter struct {
	http.ResponseWriter
	id     string
	status int
	n      int64
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
		if h := w.Header(); h.Get("X-Request-Id") == "" {
			h.Set("X-Request-Id", w.id)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection (flushes,
// deadlines).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type claimKey struct{}

// The bounds the floor applies, as idemgate's defaults.
const (
	maxBodyBytes     = 1 << 20  // max_body_bytes
	maxResponseBytes = 64 << 10 // max_response_bytes
	upstreamTimeout  = 30 * time.Second
	lease            = 10 * time.Second
	retention        = 24 * time.Hour
)

func (d *design) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id := r.Header.Get("X-Request-Id")
	if !validID(id, 200) {
		id = d.prefix + "-" + strconv.FormatUint(d.seq.Add(1), 36)
		r.Header.Set("X-Request-Id", id)
	}
	client := ""
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		client = ap.Addr().String()
	}
	sw := &statusWriter{ResponseWriter: w, id: id}
	// The route: a ServeMux pattern of the idempotent routes, matched on
	// the cleaned path; any other request passes through.
	_, route := d.routes.Handler(r)
	outcome := "passthrough"
	if keys := r.Header.Values("Idempotency-Key"); route != "" && len(keys) > 0 {
		outcome = d.keyed(sw, r, route, keys)
	} else {
		// The upstream's wait bounded: a cancel context and a timer
		// (stopped when the exchange is over, where idemgate stops its
		// own when the answer's headers arrive: the same work).
		ctx, cancel := context.WithCancel(r.Context())
		t := time.AfterFunc(upstreamTimeout, cancel)
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

// keyed runs a keyed write on route and returns its outcome.
func (d *design) keyed(w http.ResponseWriter, r *http.Request, route string, keys []string) string {
	if len(keys) != 1 || !validID(keys[0], 255) {
		http.Error(w, "bad key", http.StatusBadRequest)
		return "rejected"
	}
	key := keys[0]
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	switch {
	case err != nil:
		http.Error(w, "bad body", http.StatusBadRequest)
		return "rejected"
	case len(body) > maxBodyBytes:
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return "rejected"
	}
	// The key scoped to the route and the client's identity (its
	// Authorization header, as idemgate's default identity).
	var arr [512]byte
	auth := r.Header.Get("Authorization")
	b := binary.BigEndian.AppendUint64(arr[:0], uint64(len(auth)))
	b = binary.BigEndian.AppendUint64(append(b, auth...), uint64(len(route)))
	b = binary.BigEndian.AppendUint64(append(b, route...), uint64(len(key)))
	k := sha256.Sum256(append(b, key...))
	// The fingerprint: method, path, query and the body, a JSON body in
	// canonical form (parsed with its numbers kept, encoded again with
	// its object keys sorted).
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte(r.URL.EscapedPath()))
	h.Write([]byte(r.URL.RawQuery))
	h.Write(canonical(r.Header.Get("Content-Type"), body))
	var fp [32]byte
	h.Sum(fp[:0])
	a := &answer{key: k, fp: fp}
	switch ok, err := d.claims.claim(r.Context(), k); {
	case err != nil:
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return "store_error"
	case !ok:
		http.Error(w, "in progress", http.StatusConflict)
		return "in_progress"
	}
	// The lease renewal's timer, armed and stopped.
	renew := time.AfterFunc(lease/3, func() {})
	defer renew.Stop()
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.Header.Del("Accept-Encoding") // stored answers are plain
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), upstreamTimeout)
	defer cancel()
	d.rp.ServeHTTP(w, r.WithContext(context.WithValue(ctx, claimKey{}, a)))
	if !a.kept {
		d.claims.free(ctx, k) // no answer kept: the key is free again
	}
	return "executed"
}

// canonical returns body as fingerprinted: a JSON body parsed with its
// numbers kept and encoded again with its object keys sorted, any other
// body as sent.
func canonical(contentType string, body []byte) []byte {
	if mt, _, err := mime.ParseMediaType(contentType); err != nil || mt != "application/json" {
		return body
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return body
	}
	out, err := json.Marshal(v)
	if err != nil {
		return body
	}
	return out
}

func (d *design) modifyResponse(res *http.Response) error {
	a, ok := res.Request.Context().Value(claimKey{}).(*answer)
	if !ok {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes+1))
	if err != nil {
		res.Body.Close()
		return err
	}
	if len(b) > maxResponseBytes {
		// Too large to keep: marked so, and streamed on whole.
		if err := d.claims.keep(res.Request.Context(), a.key, []byte("too_large")); err != nil {
			res.Body.Close()
			return err
		}
		a.kept = true
		res.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), res.Body), res.Body}
		return nil
	}
	res.Body.Close()
	// One allocation: the status, the fingerprint, the header block and
	// the body.
	var kept bytes.Buffer
	kept.Grow(len(b) + 512)
	kept.WriteString(strconv.Itoa(res.StatusCode))
	kept.WriteString("\r\n")
	kept.Write(a.fp[:])
	kept.WriteString("\r\n")
	res.Header.Write(&kept)
	kept.WriteString("\r\n")
	kept.Write(b)
	if err := d.claims.keep(res.Request.Context(), a.key, kept.Bytes()); err != nil {
		return err
	}
	a.kept = true
	res.Body = io.NopCloser(bytes.NewReader(b))
	return nil
}

// logLine writes the request's access line. Its strings are quoted by
// strconv, which is JSON for the printable ASCII the benchmarks send (a
// control or non-ASCII byte would need JSON's escapes, as idemgate's
// jsonlog writes them).
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

// validID reports whether s is 1 to max visible ASCII characters (a
// request id: 200, an Idempotency-Key: 255).
func validID(s string, max int) bool {
	if len(s) == 0 || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}
