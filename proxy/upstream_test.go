package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/problem"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore/memstore"
)

func TestUpstreamUnavailableReleasesKey(t *testing.T) {
	t.Parallel()
	tp := newTestProxy(t, "http://"+testutil.DeadAddr(t), nil)
	for i := range 2 {
		r := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`)
		if r.status != 502 || problemCode(t, r) != "upstream_unavailable" {
			t.Errorf("attempt %d = %v; want 502 upstream_unavailable (key released, so never 409)", i, r)
		}
	}
	r := tp.do(t, "GET", "/anything", "", "")
	if r.status != 502 || problemCode(t, r) != "upstream_unavailable" {
		t.Errorf("pass-through = %v; want 502 upstream_unavailable", r)
	}
}

func TestUpstreamTimeoutKeepsKey(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}
	tp := newTestProxy(t, up.URL, nil)
	r := tp.do(t, "POST", "/slow", "k", `{}`)
	if r.status != 504 || problemCode(t, r) != "upstream_timeout" {
		t.Fatalf("slow upstream = %v; want 504 upstream_timeout", r)
	}
	// The outcome is unknown: the key stays claimed until its lease ends.
	r = tp.do(t, "POST", "/slow", "k", `{}`)
	if r.status != 409 || problemCode(t, r) != "idempotency_in_progress" {
		t.Errorf("retry within the lease = %v; want 409 in progress", r)
	}
	tp.clock.Advance(121 * time.Second)
	r = tp.do(t, "POST", "/slow", "k", `{}`)
	if r.status != 504 {
		t.Errorf("retry after the lease = %v; want a takeover that runs (and times out again)", r)
	}
	// The takeover reached the upstream (which may see it after the proxy
	// gave up on a loaded machine).
	testutil.Eventually(t, 10*time.Second, "a second execution of k", func() bool { return up.executions("POST", "/slow", "k") == 2 })
}

func TestUpstreamBrokenKeepsKey(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	tp := newTestProxy(t, up.URL, nil)
	r := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`)
	if r.status != 502 || problemCode(t, r) != "upstream_broken" {
		t.Fatalf("broken upstream = %v; want 502 upstream_broken", r)
	}
	r = tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`)
	if r.status != 409 || problemCode(t, r) != "idempotency_in_progress" {
		t.Errorf("retry = %v; want 409 in progress (outcome unknown)", r)
	}
}

func TestBrokenBodyIsNotStored(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(200)
		w.Write([]byte("partial"))
		http.NewResponseController(w).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
	tp := newTestProxy(t, up.URL, nil)
	req, _ := http.NewRequest("POST", tp.URL+"/ucp/v1/carts", strings.NewReader(`{}`))
	req.Header.Set("Idempotency-Key", "k")
	req.Header.Set("Content-Type", "application/json")
	if res, err := tp.Client().Do(req); err == nil {
		_, err = io.ReadAll(res.Body)
		res.Body.Close()
		if err == nil {
			t.Errorf("a cut answer reached the client whole")
		}
	}
	r := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`)
	if r.status != 409 || problemCode(t, r) != "idempotency_in_progress" {
		t.Errorf("retry after a cut answer = %v; want 409 in progress, never a partial replay", r)
	}
}

func TestTakeoverFencesLateCompletion(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	hold := make(chan struct{})
	var calls atomic.Int32
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		if calls.Add(1) == 1 {
			<-hold
		}
		fmt.Fprintf(w, "execution %d", n)
	}
	tp := newTestProxy(t, up.URL, nil)
	first := make(chan result)
	go func() { first <- tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`) }()
	testutil.Eventually(t, 10*time.Second, "the first call to reach the upstream", func() bool { return calls.Load() == 1 })
	tp.clock.Advance(121 * time.Second) // the holder's lease ends
	second := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`)
	if second.status != 200 || string(second.body) != "execution 2" {
		t.Fatalf("takeover = %v; want execution 2", second)
	}
	close(hold)
	if r := <-first; string(r.body) != "execution 1" {
		t.Errorf("first client = %v; want its own answer, execution 1", r)
	}
	r := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`)
	if string(r.body) != "execution 2" || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay = %v; want the takeover's answer (the late completion was fenced)", r)
	}
}

func TestReplayAfterUpstreamStopped(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, nil)
	first := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`)
	up.Close()
	again := tp.do(t, "POST", "/ucp/v1/carts", "k", `{}`)
	if again.status != first.status || !bytes.Equal(again.body, first.body) {
		t.Errorf("replay with the upstream down = %v; want %v", again, first)
	}
}

func TestClientHangUpStoresWholeAnswer(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	half := bytes.Repeat([]byte("0123456789abcdef"), 24<<10/16)
	cont := make(chan struct{})
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(200)
		w.Write(half)
		http.NewResponseController(w).Flush()
		<-cont
		w.Write(bytes.ToUpper(half))
	}
	tp := newTestProxy(t, up.URL, nil)
	conn, err := net.Dial("tcp", tp.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /ucp/v1/carts HTTP/1.1\r\nHost: x\r\nIdempotency-Key: hang\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
	br := bufio.NewReader(conn)
	if _, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	}
	io.ReadFull(br, make([]byte, 1000)) // part of the first half
	conn.Close()
	close(cont)
	want := append(append([]byte(nil), half...), bytes.ToUpper(half)...)
	var r result
	for i := 0; i < 100; i++ {
		r = tp.do(t, "POST", "/ucp/v1/carts", "hang", `{}`)
		if r.status != 409 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Log(tp.logs.String())
	if r.status != 200 || !bytes.Equal(r.body, want) || r.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry = %d, %d bytes, replayed %q; want 200 with all %d bytes replayed", r.status, len(r.body), r.header.Get("Idempotent-Replayed"), len(want))
	}
	if n := up.executions("POST", "/ucp/v1/carts", "hang"); n != 1 {
		t.Errorf("executions = %d; want 1", n)
	}
}

// TestNoResendOnStaleConnection: an upstream that closes a kept-alive
// connection just as the next keyed write arrives on it must never see the
// write twice (Go's Transport would resend it: net/http isReplayable).
func TestNoResendOnStaleConnection(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(func() { l.Close() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for i := 0; ; i++ {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					mu.Lock()
					seen[req.Header.Get("Idempotency-Key")]++
					mu.Unlock()
					if i == 1 {
						return // the second request on a connection: close without answering
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				}
			}()
		}
	}()
	tp := newTestProxy(t, "http://"+l.Addr().String(), nil)
	for _, body := range []string{"", `{"a":1}`} {
		first := tp.do(t, "POST", "/ucp/v1/carts", "first"+body, body)
		if first.status != 200 {
			t.Fatalf("first = %v", first)
		}
		r := tp.do(t, "POST", "/ucp/v1/carts", "second"+body, body)
		if r.status != 502 || problemCode(t, r) != "upstream_broken" {
			t.Errorf("write on a connection the upstream dropped (body %q) = %v; want 502 upstream_broken", body, r)
		}
		mu.Lock()
		if n := seen["second"+body]; n != 1 {
			t.Errorf("upstream saw the keyed write %d times (body %q); want exactly 1", n, body)
		}
		mu.Unlock()
	}
}

func TestOverloaded(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.MaxBufferedBytes, o.MaxBufferedBytesPerClient = 10, 10 })
	r := tp.do(t, "POST", "/ucp/v1/carts", "k", strings.Repeat("x", 11))
	if r.status != 503 || problemCode(t, r) != "overloaded" || r.header.Get("Retry-After") != "1" {
		t.Errorf("over max_buffered_bytes = %v; want 503 overloaded", r)
	}
	if r := tp.do(t, "POST", "/ucp/v1/carts", "k", "1234567890"); r.status != 201 {
		t.Errorf("within the budget = %v; want 201 (the budget was given back)", r)
	}
}

func TestStoreFullFailsClosed(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(_ *Options, m *memstore.Options) { m.MaxEntries = 1 })
	tp.do(t, "POST", "/ucp/v1/carts", "one", `{}`)
	r := tp.do(t, "POST", "/ucp/v1/carts", "two", `{}`)
	if r.status != 503 || problemCode(t, r) != "idempotency_unavailable" || r.header.Get("Retry-After") != "1" {
		t.Errorf("store full = %v; want 503 idempotency_unavailable", r)
	}
	if n := up.executions("POST", "/ucp/v1/carts", "two"); n != 0 {
		t.Errorf("upstream ran the refused write %d times; want 0", n)
	}
	// Fail open for requests without a key.
	if r := tp.do(t, "POST", "/ucp/v1/carts", "", `{}`); r.status != 201 {
		t.Errorf("unkeyed write while the store is full = %v; want 201", r)
	}
	tp.store.Close()
	r = tp.do(t, "POST", "/ucp/v1/carts", "three", `{}`)
	if r.status != 503 || problemCode(t, r) != "idempotency_unavailable" {
		t.Errorf("store closed = %v; want 503 idempotency_unavailable", r)
	}
}

func TestForwarding(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, nil)
	tests := []struct {
		name, method, uri, key string
	}{
		{"raw query kept", "GET", "/search?b=2;a=1&c=%zz&d=%41", ""},
		{"escaped path kept", "GET", "/a%2Fb/C%20d", ""},
		{"keyed write", "POST", "/ucp/v1/carts?x=%2a", "k"},
		{"key on GET ignored", "GET", "/ucp/v1/carts/1", "k"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, tp.URL+tc.uri, nil)
			req.Host = "shop.example"
			req.Header.Set("X-Forwarded-For", "6.6.6.6")
			req.Header.Set("Accept-Encoding", "gzip")
			if tc.key != "" {
				req.Header.Set("Idempotency-Key", tc.key)
			}
			res, err := tp.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			readResult(t, res)
			got := up.lastRequest()
			if got.RequestURI != tc.uri {
				t.Errorf("upstream RequestURI = %q; want %q", got.RequestURI, tc.uri)
			}
			if got.Host != "shop.example" {
				t.Errorf("upstream Host = %q; want the client's", got.Host)
			}
			if xff := got.Header.Get("X-Forwarded-For"); xff != "127.0.0.1" {
				t.Errorf("X-Forwarded-For = %q; want the peer only (untrusted)", xff)
			}
			if got.Header.Get("X-Forwarded-Host") != "shop.example" || got.Header.Get("X-Forwarded-Proto") != "http" {
				t.Errorf("X-Forwarded-Host/Proto = %q/%q", got.Header.Get("X-Forwarded-Host"), got.Header.Get("X-Forwarded-Proto"))
			}
			if got.Header.Get("X-Request-Id") == "" || got.Header.Get("X-Request-Id") != res.Header.Get("X-Request-Id") {
				t.Errorf("X-Request-Id upstream %q, client %q; want the same", got.Header.Get("X-Request-Id"), res.Header.Get("X-Request-Id"))
			}
			if tc.key != "" && got.Header.Get("Idempotency-Key") != tc.key {
				t.Errorf("Idempotency-Key upstream = %q; want %q", got.Header.Get("Idempotency-Key"), tc.key)
			}
			keyed := tc.method == "POST"
			if ae := got.Header.Get("Accept-Encoding"); keyed && ae != "" || !keyed && ae != "gzip" {
				t.Errorf("Accept-Encoding upstream = %q (keyed %v)", ae, keyed)
			}
		})
	}
}

func TestTrustedProxyForwarding(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.TrustedProxies = mustPrefixes("127.0.0.0/8")
	})
	req, _ := http.NewRequest("GET", tp.URL+"/x", nil)
	req.Header.Add("X-Forwarded-For", "1.1.1.1, 2.2.2.2")
	req.Header.Add("X-Forwarded-For", "3.3.3.3")
	req.Header.Set("X-Forwarded-Proto", "https")
	res, err := tp.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readResult(t, res)
	got := up.lastRequest()
	if xff := got.Header.Get("X-Forwarded-For"); xff != "1.1.1.1, 2.2.2.2, 3.3.3.3, 127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q; want the chain with the peer appended", xff)
	}
	if got.Header.Get("X-Forwarded-Proto") != "https" {
		t.Errorf("X-Forwarded-Proto = %q; want the trusted proxy's https", got.Header.Get("X-Forwarded-Proto"))
	}
}

// writeCounter counts the Write calls on the connections it dials: one
// per system call that sends to the upstream.
type writeCounter struct {
	net.Conn
	writes *atomic.Int64
}

func (c writeCounter) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// A keyed request's body, read whole, goes upstream with its headers in
// one write; a pass-through body is streamed, and net/http flushes its
// headers first (issue 17: one system call less per keyed write).
func TestKeyedRequestIsOneWrite(t *testing.T) {
	up := newUpstream(t)
	var writes atomic.Int64
	tr := NewTransport()
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{Conn: c, writes: &writes}, nil
	}
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Transport = tr })
	body := `{"items":[{"sku":"A1","qty":2}]}`
	cases := []struct {
		name, method, path, key string
		want                    int64
	}{
		{"keyed POST", "POST", "/ucp/v1/carts", "k-one-write", 1},
		{"keyed PUT", "PUT", "/ucp/v1/carts/c1", "k-one-write-put", 1},
		{"keyless POST on a keyed route", "POST", "/ucp/v1/carts", "", 2},
		{"POST on no route", "POST", "/elsewhere", "", 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := writes.Load()
			r := tp.do(t, tc.method, tc.path, tc.key, body)
			if r.status != http.StatusCreated {
				t.Fatalf("%s %s = %v", tc.method, tc.path, r)
			}
			if got := writes.Load() - before; got != tc.want {
				t.Errorf("writes upstream = %d, want %d", got, tc.want)
			}
			if !bytes.Contains(r.body, []byte(strconv.Quote(body))) {
				t.Errorf("the upstream echoed %s, want the body %s", r.body, body)
			}
		})
	}
}

// TestRequestIDs: a client's request ID of 1–200 visible ASCII characters
// is forwarded and answered as sent, and an errors template escapes it
// (text/html here: it was reflected unescaped); any other is replaced by a
// generated one, forwarded and answered alike. A live answer keeps the
// upstream's own request ID, once; idemgate's stands where the upstream
// sent none; a replay carries the retry's own ID.
func TestRequestIDs(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		if v := r.Header.Get("X-Upstream-Id"); v != "" {
			w.Header().Set("X-Request-Id", v)
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "execution %d", n)
	}
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) {
		o.Stages.Routes = append([]Route{{Name: "html", Method: "POST", Path: "/html", Idempotent: true, RequireKey: true,
			Errors: &problem.Spec{ContentType: "text/html", Body: `<p>{{.Detail}} ({{.RequestID}})</p>`}}}, defaultRoutes...)
	})
	const hostile = `<script>alert(1)</script>`
	if r := tp.do(t, "POST", "/html", "", `{}`, "X-Request-Id", hostile); r.status != 400 || r.header.Get("X-Request-Id") != hostile ||
		strings.Contains(string(r.body), "<script>") || !strings.Contains(string(r.body), "&lt;script&gt;") {
		t.Errorf("html error with a hostile request ID = %v %v; want it escaped", r, r.header)
	}
	for _, tc := range []struct {
		name, id string
		kept     bool
	}{
		{"plain", "req-1", true},
		{"visible ASCII", `a"b\c<d>`, true},
		{"200 characters", strings.Repeat("r", 200), true},
		{"201 characters", strings.Repeat("r", 201), false},
		{"space", "a b", false},
		{"non-ASCII", "é", false},
	} {
		r := tp.do(t, "POST", "/ucp/v1/carts", "", `{}`, "X-Request-Id", tc.id)
		got, sent := r.header.Values("X-Request-Id"), up.lastRequest().Header.Values("X-Request-Id")
		if len(got) != 1 || len(sent) != 1 || got[0] != sent[0] || (got[0] == tc.id) != tc.kept || got[0] == "" {
			t.Errorf("%s: answered %q, forwarded %q; want one ID, the same, the client's: %v", tc.name, got, sent, tc.kept)
		}
	}
	// The upstream's own ID on a live answer; the retry's own on a replay.
	live := tp.do(t, "POST", "/ucp/v1/carts", "k-up", `{}`, "X-Request-Id", "mine-1", "X-Upstream-Id", "theirs-1")
	if got := live.header.Values("X-Request-Id"); live.status != 201 || len(got) != 1 || got[0] != "theirs-1" {
		t.Errorf("live answer's request IDs %q; want the upstream's [theirs-1]", got)
	}
	replay := tp.do(t, "POST", "/ucp/v1/carts", "k-up", `{}`, "X-Request-Id", "mine-2", "X-Upstream-Id", "theirs-1")
	if got := replay.header.Values("X-Request-Id"); replay.header.Get("Idempotent-Replayed") != "true" || len(got) != 1 || got[0] != "mine-2" {
		t.Errorf("replay's request IDs %q; want the retry's [mine-2]", got)
	}
	if got := tp.do(t, "POST", "/ucp/v1/carts", "k-own", `{}`, "X-Request-Id", "mine-3").header.Values("X-Request-Id"); len(got) != 1 || got[0] != "mine-3" {
		t.Errorf("answer without the upstream's ID: %q; want [mine-3]", got)
	}
}

// A pass-through waits for the upstream's response headers at most the
// route's timeout (504 upstream_timeout, the upstream's request canceled);
// once the headers came, the body streams on past it. The header timers
// are pooled (issue 31): pass-throughs after and among timed-out ones are
// never canceled by a timer of another request.
func TestPassThroughHeaderTimeout(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	up := newUpstream(t)
	var canceled atomic.Int64
	up.handler = func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.URL.Path {
		case "/hang":
			select {
			case <-r.Context().Done():
				canceled.Add(1)
			case <-time.After(20 * time.Second):
			}
		case "/stream":
			w.WriteHeader(http.StatusOK)
			for i := range 3 {
				fmt.Fprintf(w, "chunk %d;", i)
				w.(http.Flusher).Flush()
				time.Sleep(timeout / 2)
			}
		default:
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "fast")
		}
	}
	tp := newTestProxy(t, up.URL, func(o *Options, _ *memstore.Options) { o.Timeout = timeout })

	const hangs, fast = 4, 64
	var wg sync.WaitGroup
	errs := make(chan string, hangs+fast+1)
	get := func(path string, wantStatus int, wantBody, wantCode string) {
		defer wg.Done()
		res, err := tp.Client().Get(tp.URL + path)
		if err != nil {
			errs <- fmt.Sprintf("GET %s: %v", path, err)
			return
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		r := result{res.StatusCode, res.Header, b}
		switch {
		case err != nil:
			errs <- fmt.Sprintf("GET %s: reading: %v", path, err)
		case r.status != wantStatus:
			errs <- fmt.Sprintf("GET %s = %d %s; want %d", path, r.status, b, wantStatus)
		case wantCode != "" && problemCode(t, r) != wantCode:
			errs <- fmt.Sprintf("GET %s = %s; want %s", path, b, wantCode)
		case wantBody != "" && string(b) != wantBody:
			errs <- fmt.Sprintf("GET %s = %q; want %q", path, b, wantBody)
		}
	}
	start := time.Now()
	wg.Add(1)
	go get("/stream", http.StatusOK, "chunk 0;chunk 1;chunk 2;", "")
	for range hangs {
		wg.Add(1)
		go get("/hang", http.StatusGatewayTimeout, "", "upstream_timeout")
	}
	for i := range fast {
		if i == fast/2 {
			time.Sleep(timeout + timeout/4) // the rest after the hangs timed out
		}
		wg.Add(1)
		go get("/fast", http.StatusOK, "fast", "")
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if took := time.Since(start); took < timeout*3/2 {
		t.Errorf("done after %v; the stream alone takes 1.5s", took)
	}
	testutil.Eventually(t, 10*time.Second, "the upstream's hung requests canceled", func() bool { return canceled.Load() == hangs })
}

// A header timer calls its own request's cancel, once, after its time, and
// never one of an earlier request it was pooled after: 8 goroutines start
// and stop timers of which every other one fires (1ns) and every other one
// is stopped first (1h), each with a cancel of its own.
func TestHeaderTimerPool(t *testing.T) {
	t.Parallel()
	const workers, each = 8, 200
	counts := make([]atomic.Int64, workers*each)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				n := w*each + i
				cancel := func(cause error) {
					if cause != errHeaderTimeout {
						t.Errorf("timer %d canceled with %v; want errHeaderTimeout", n, cause)
					}
					counts[n].Add(1)
				}
				if n%2 == 0 {
					ht := startHeaderTimer(time.Hour, cancel)
					ht.stop() // the headers came
					ht.release()
					continue
				}
				ht := startHeaderTimer(time.Nanosecond, cancel)
				for counts[n].Load() == 0 {
					time.Sleep(10 * time.Microsecond)
				}
				ht.stop() // too late: it fired
				ht.release()
			}
		})
	}
	wg.Wait()
	time.Sleep(10 * time.Millisecond) // a stray callback would land here
	for n := range counts {
		want := int64(n % 2)
		if got := counts[n].Load(); got != want {
			t.Errorf("timer %d's cancel ran %d times; want %d", n, got, want)
		}
	}
}
