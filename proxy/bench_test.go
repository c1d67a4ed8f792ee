package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemgate/idemgate/internal/canonjson"
	"github.com/idemgate/idemgate/internal/jsonlog"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// benchReqBody is the small JSON body every proxied benchmark request sends.
var benchReqBody = []byte(`{"currency":"EUR","items":[{"sku":"SKU-1001","quantity":2},{"sku":"SKU-2002","quantity":1}]}`)

// benchRespBody is the upstream's answer (~100 bytes of JSON, 201).
var benchRespBody = []byte(`{"id":"cart_01HZX3Q4V7K2N8M5P6R9T0W1Y2","status":"created","currency":"EUR","total":106.46,"items":3}`)

const benchReplayHeader = "Idempotent-Replayed"

// benchUpstream is the loopback API behind every proxy in the benchmarks: it
// drains the request, counts it and answers 201 with benchRespBody.
type benchUpstream struct {
	*httptest.Server
	hits atomic.Int64
}

func newBenchUpstream(b *testing.B) *benchUpstream {
	b.Helper()
	u := &benchUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		u.hits.Add(1)
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		w.WriteHeader(http.StatusCreated)
		w.Write(benchRespBody)
	}))
	b.Cleanup(u.Close)
	return u
}

// newBenchClient returns the client every case shares: enough idle
// connections that parallel requests never redial.
func newBenchClient(b *testing.B) *http.Client {
	b.Helper()
	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		DisableCompression:  true,
	}
	b.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// newBenchIdemgate serves idemgate (memory store, no edge limit) in front of
// upstream. Each call gets a fresh store sized for any b.N.
func newBenchIdemgate(b *testing.B, upstream string, mods ...func(*Options)) *httptest.Server {
	b.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		b.Fatal(err)
	}
	tr := NewTransport()
	srv := httptest.NewServer(newBenchProxy(b, u, tr, mods...))
	b.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	return srv
}

// newBenchProxy is idemgate (memory store, no edge limit) in front of
// upstream through tr, closed when b ends.
func newBenchProxy(b *testing.B, upstream *url.URL, tr http.RoundTripper, mods ...func(*Options)) *Proxy {
	b.Helper()
	st := memstore.New(memstore.Options{MaxEntries: 1 << 30, MaxBytes: 1 << 40})
	opts := Options{
		Upstream:  upstream,
		Transport: tr,
		Stages: Stages{Routes: []Route{
			{Name: "create_cart", Method: http.MethodPost, Path: "/ucp/v1/carts", Idempotent: true},
			{Name: "get_cart", Method: http.MethodGet, Path: "/ucp/v1/carts/{id}"},
		}},
		Store:       st,
		Idempotency: Idempotency{ReplayHeader: benchReplayHeader},
	}
	for _, mod := range mods {
		mod(&opts)
	}
	p, err := newOpts(opts)
	if err != nil {
		b.Fatalf("New = %v", err)
	}
	b.Cleanup(func() { // after the server's Close (cleanups run last first)
		p.Close()
		st.Close()
	})
	return p
}

// benchLogged gives a benchmarked idemgate cmd/idemgate's access log (its
// handler, internal/jsonlog at level info, here to io.Discard; the proxy's
// logger is internal/app's log.With("component", "proxy")) and metrics on
// a registry of its own.
func benchLogged(o *Options) {
	o.Logger = slog.New(jsonlog.New(io.Discard, nil)).With("component", "proxy")
	o.Metrics = NewMetrics(prometheus.NewRegistry(), "bench", "")
}

// benchKept gives a benchmarked idemgate cmd/idemgate's late answer wait
// (5m) and late_answer_max (1000): every keyed write is a kept call
// (late.go).
func benchKept(o *Options) {
	o.Idempotency.LateAnswerWait = 5 * time.Minute
	o.Idempotency.LateAnswerMax = 1000
}

// benchPost sends one POST of benchReqBody and checks the answer: want
// status, the whole upstream body, and whether it was a replay.
func benchPost(b *testing.B, c *http.Client, target, key string, wantReplay bool) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, target, bytes.NewReader(benchReqBody))
	if err != nil {
		b.Error(err) // called from RunParallel goroutines: no Fatal
		return
	}
	req.Header["Content-Type"] = []string{"application/json"}
	if key != "" {
		req.Header["Idempotency-Key"] = []string{key}
	}
	res, err := c.Do(req)
	if err != nil {
		b.Error(err)
		return
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil {
		b.Errorf("reading the body: %v", err)
	}
	if res.StatusCode != http.StatusCreated {
		b.Errorf("status %d; want %d", res.StatusCode, http.StatusCreated)
		return
	}
	if n != int64(len(benchRespBody)) {
		b.Errorf("body %d bytes; want %d", n, len(benchRespBody))
	}
	if got := res.Header.Get(benchReplayHeader) == "true"; got != wantReplay {
		b.Errorf("replayed = %v; want %v", got, wantReplay)
	}
}

// BenchmarkProxy measures a request through idemgate against a bare
// httputil.ReverseProxy, all against the same loopback upstream and through
// the same client, in one process.
func BenchmarkProxy(b *testing.B) {
	up := newBenchUpstream(b)
	client := newBenchClient(b)
	upURL, err := url.Parse(up.URL)
	if err != nil {
		b.Fatal(err)
	}

	for _, c := range []struct {
		name string
		pool httputil.BufferPool
	}{
		{"bare", nil},
		// The fair floor (issue 31): with a pool of copy buffers, as
		// idemgate has; without one, ReverseProxy allocates 32 KB per
		// request, which flatters idemgate against bare.
		{"bare_pooled", &bufferPool{}},
	} {
		b.Run(c.name, func(b *testing.B) { benchBare(b, client, upURL, c.pool) })
	}

	b.Run("passthrough", func(b *testing.B) {
		target := newBenchIdemgate(b, up.URL).URL + "/ucp/v1/orders"
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				benchPost(b, client, target, "", false)
			}
		})
	})

	b.Run("first_write", func(b *testing.B) {
		target := newBenchIdemgate(b, up.URL).URL + "/ucp/v1/carts"
		var seq atomic.Uint64
		before := up.hits.Load()
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 0, 32)
			for pb.Next() {
				buf = strconv.AppendUint(append(buf[:0], "bench-"...), seq.Add(1), 36)
				benchPost(b, client, target, string(buf), false)
			}
		})
		b.StopTimer()
		if got := up.hits.Load() - before; got != int64(b.N) {
			b.Errorf("upstream ran %d requests; want b.N = %d", got, b.N)
		}
	})

	// As deployed (issue 31): the access log on, JSON as cmd/idemgate
	// writes it (to io.Discard here), and the metrics recorded.
	b.Run("passthrough_logged", func(b *testing.B) {
		target := newBenchIdemgate(b, up.URL, benchLogged).URL + "/ucp/v1/orders"
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				benchPost(b, client, target, "", false)
			}
		})
	})

	b.Run("first_write_logged", func(b *testing.B) {
		target := newBenchIdemgate(b, up.URL, benchLogged).URL + "/ucp/v1/carts"
		var seq atomic.Uint64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			buf := make([]byte, 0, 32)
			for pb.Next() {
				buf = strconv.AppendUint(append(buf[:0], "bench-"...), seq.Add(1), 36)
				benchPost(b, client, target, string(buf), false)
			}
		})
	})

	b.Run("replay", func(b *testing.B) {
		target := newBenchIdemgate(b, up.URL).URL + "/ucp/v1/carts"
		const key = "bench-replay"
		benchPost(b, client, target, key, false)
		before := up.hits.Load()
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				benchPost(b, client, target, key, true)
			}
		})
		b.StopTimer()
		if got := up.hits.Load() - before; got != 0 {
			b.Errorf("upstream ran %d replayed requests; want 0", got)
		}
	})
}

// benchFingerprintBody is a realistic ~1 KiB keyed write: a checkout,
// pretty-printed, keys unsorted, a few escapes.
var benchFingerprintBody = []byte(`{
  "order_id": "ord_01HZX3Q4V7K2N8M5P6R9T0W1Y2",
  "currency": "EUR",
  "customer": {
    "name": "Zo\u00e9 M\u00fcller",
    "email": "zoe.mueller@example.com",
    "address": {"street": "Hauptstra\u00dfe 12", "city": "Berlin", "postal_code": "10115", "country": "DE"}
  },
  "items": [
    {"sku": "SKU-1001", "name": "Espresso beans 1kg", "quantity": 2, "unit_price": 24.90, "added_at": "2024-05-01T10:00:00Z"},
    {"sku": "SKU-2002", "name": "Milk frother", "quantity": 1, "unit_price": 39.00, "added_at": "2024-05-01T10:02:13Z"},
    {"sku": "SKU-3003", "name": "Cup \"Barista\" 6-pack", "quantity": 1, "unit_price": 18.5, "added_at": "2024-05-01T10:05:42Z"}
  ],
  "shipping": {"method": "express", "price": 7.95, "notes": "Leave at the door\/reception.\nRing twice."},
  "payment": {"method": "card", "token": "tok_4f9a2b7c1d8e3f60", "three_ds": true, "installments": null},
  "discounts": [{"code": "SPRING10", "amount": 8.79}],
  "total": 106.46,
  "meta": {"sent_at": "2024-05-01T10:06:00.123Z", "client": "ucp-agent/1.4.2", "retries": 0, "trace": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
}`)

// BenchmarkFingerprint is the per-request fingerprint of a 1 KiB JSON body
// with one ignored member.
func BenchmarkFingerprint(b *testing.B) {
	ptr, err := canonjson.ParsePointer("/meta/sent_at")
	if err != nil {
		b.Fatal(err)
	}
	ignore := []canonjson.Pointer{ptr}
	want := fingerprint("PUT", "/ucp/v1/carts/c1", "", "application/json", benchFingerprintBody, ignore)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchFingerprintBody)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if got := fingerprint("PUT", "/ucp/v1/carts/c1", "", "application/json", benchFingerprintBody, ignore); got != want {
				b.Errorf("fingerprint %x; want %x", got, want)
			}
		}
	})
}

// benchBare is BenchmarkProxy's baseline: a bare httputil.ReverseProxy
// with idemgate's Transport and the given buffer pool (nil: none).
func benchBare(b *testing.B, client *http.Client, upURL *url.URL, pool httputil.BufferPool) {
	tr := NewTransport()
	rp := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(upURL) },
		Transport:  tr,
		BufferPool: pool,
	}
	srv := httptest.NewServer(rp)
	b.Cleanup(func() {
		srv.Close()
		tr.CloseIdleConnections()
	})
	target := srv.URL + "/ucp/v1/carts"
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			benchPost(b, client, target, "", false)
		}
	})
}

// benchRoundTripper is an upstream in memory for BenchmarkHandler: it reads
// the request's body and answers 201 with benchRespBody. Like net/http's
// Transport it derives a cancel context of its own from the request's and
// watches it, so that a context idemgate adds costs here what it costs
// there; the loopback, the connections and the parsing are left out.
type benchRoundTripper struct{}

func (benchRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	defer cancel(nil)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_ = ctx.Done()
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	return &http.Response{
		Status:        "201 Created",
		StatusCode:    http.StatusCreated,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json"}, "Content-Length": {strconv.Itoa(len(benchRespBody))}},
		Body:          io.NopCloser(bytes.NewReader(benchRespBody)),
		ContentLength: int64(len(benchRespBody)),
		Request:       req,
	}, nil
}

// benchWriter is the ResponseWriter of BenchmarkHandler: it counts.
type benchWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *benchWriter) Header() http.Header { return w.h }
func (w *benchWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *benchWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	return len(p), nil
}

// BenchmarkHandler is the handler's own work per request: idemgate against a
// bare httputil.ReverseProxy with a pooled buffer, both calling the same
// upstream in memory (benchRoundTripper), on one goroutine, without the
// loopback, the connections and the parsing that BenchmarkProxy has and
// that are the same for both. The difference of two cases is what idemgate
// adds; it is steadier on a shared machine than BenchmarkProxy's, and its
// CPU profile is idemgate's alone.
func BenchmarkHandler(b *testing.B) {
	upURL := &url.URL{Scheme: "http", Host: "127.0.0.1:9"}
	bare := &httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(upURL) },
		Transport:  benchRoundTripper{},
		BufferPool: &bufferPool{},
	}
	idem := func(b *testing.B, mods ...func(*Options)) http.Handler {
		return newBenchProxy(b, upURL, benchRoundTripper{}, mods...)
	}
	type request struct {
		method, path string
		body         []byte
		keyed        bool
	}
	get := request{method: http.MethodGet, path: "/other/ucp/v1/carts/cart_1"}
	post := request{method: http.MethodPost, path: "/ucp/v1/carts", body: benchReqBody, keyed: true}
	for _, c := range []struct {
		name string
		h    func(*testing.B) http.Handler
		req  request
	}{
		{"bare_get", func(*testing.B) http.Handler { return bare }, get},
		{"passthrough_get", func(b *testing.B) http.Handler { return idem(b) }, get},
		{"passthrough_get_logged", func(b *testing.B) http.Handler { return idem(b, benchLogged) }, get},
		{"bare_post", func(*testing.B) http.Handler { return bare }, request{method: http.MethodPost, path: post.path, body: post.body}},
		{"first_write", func(b *testing.B) http.Handler { return idem(b) }, post},
		{"first_write_logged", func(b *testing.B) http.Handler { return idem(b, benchLogged) }, post},
		// As cmd/idemgate runs a keyed write (issue 31): with a late
		// answer wait (its default, 5m), through late.go's kept call.
		{"first_write_kept", func(b *testing.B) http.Handler { return idem(b, benchKept) }, post},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := c.h(b)
			u, err := url.Parse("http://idemgate.test" + c.req.path)
			if err != nil {
				b.Fatal(err)
			}
			var seq uint64
			key := make([]byte, 0, 32)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			for range b.N {
				// What net/http's server hands a handler: a request with a
				// cancel context of its own, its headers and its body.
				ctx, cancel := context.WithCancel(context.Background())
				hdr := http.Header{"User-Agent": {"bench"}, "Accept": {"*/*"}}
				var body io.ReadCloser = http.NoBody
				if c.req.body != nil {
					hdr["Content-Type"] = []string{"application/json"}
					hdr["Content-Length"] = []string{strconv.Itoa(len(c.req.body))}
					body = io.NopCloser(bytes.NewReader(c.req.body))
				}
				if c.req.keyed {
					seq++
					key = strconv.AppendUint(append(key[:0], "bench-"...), seq, 36)
					hdr["Idempotency-Key"] = []string{string(key)}
				}
				req := (&http.Request{
					Method: c.req.method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
					Header: hdr, Body: body, ContentLength: int64(len(c.req.body)),
					Host: u.Host, RemoteAddr: "127.0.0.1:40000", RequestURI: c.req.path,
				}).WithContext(ctx)
				w := &benchWriter{h: http.Header{}}
				h.ServeHTTP(w, req)
				cancel()
				if w.status != http.StatusCreated || w.n != len(benchRespBody) {
					b.Fatalf("status %d, %d bytes; want 201, %d", w.status, w.n, len(benchRespBody))
				}
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}
