package connguard

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serverMaxHeaderBytes is the test servers' own limit: the largest
// max_header_bytes the config accepts.
const serverMaxHeaderBytes = 16 << 20

// headOf returns a GET head of exactly n bytes.
func headOf(path string, n int) string {
	h := "GET " + path + " HTTP/1.1\r\nHost: x\r\nX-Pad: "
	return h + strings.Repeat("p", n-len(h)-4) + "\r\n\r\n"
}

// guarded starts a loopback server behind a Listener; its handler calls
// Check, reads the body and answers "path:closed:body-length".
func guarded(t testing.TB, maxHeader int) (addr string, served func() []string) {
	t.Helper()
	return guardedLimit(t, NewLimit(maxHeader))
}

// guardedLimit is guarded under a Limit the test changes.
func guardedLimit(t testing.TB, limit *Limit) (addr string, served func() []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var paths []string
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			closed := Check(w, r)
			if _, ok := r.Header[Marker]; ok {
				t.Errorf("%s: marker still in the request after Check", r.URL.Path)
			}
			body, err := io.ReadAll(r.Body)
			mu.Lock()
			paths = append(paths, r.URL.Path)
			mu.Unlock()
			fmt.Fprintf(w, "%s:%v:%d:%v", r.URL.Path, closed, len(body), err)
		}),
		ReadHeaderTimeout: 10 * time.Second,
		// Far above the Listener's limit, as a server whose limit
		// changes live needs (its own limit is read unsynchronized): the
		// Listener alone decides.
		MaxHeaderBytes: serverMaxHeaderBytes,
	}
	go srv.Serve(NewListener(ln, limit))
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), paths...)
	}
}

// exchange writes raw to a new connection and reads answers until the
// server closes it or want answers came (then it closes).
func exchange(t *testing.T, addr, raw string, want int) []*http.Response {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go io.WriteString(c, raw)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	var out []*http.Response
	for len(out) < want {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(bytes.NewReader(b))
		out = append(out, resp)
	}
	return out
}

func bodyOf(r *http.Response) string {
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

func TestPipelining(t *testing.T) {
	t.Parallel()
	const (
		getA   = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
		postCL = "POST /cl HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
		chunk  = "POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\nA\r\n0123456789\r\n0\r\nTrailer-X: 1\r\n\r\n"
		clte   = "POST /clte HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
		tecl   = "POST /tecl HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n"
		getB   = "GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	)
	for _, tc := range []struct {
		name string
		raw  string
		want []string // answers, in order: "path:closed:len"
	}{
		{"clean pipeline is all served", getA + postCL + chunk + getB, []string{"/a:false:0", "/cl:false:5", "/chunked:false:15", "/b:false:0"}},
		{"CL+TE: the next request is not served", clte + getB, []string{"/clte:true:0"}},
		{"TE+CL: the next request is not served", tecl + getB, []string{"/tecl:true:0"}},
		{"CL+TE after clean requests", getA + postCL + chunk + clte + getB, []string{"/a:false:0", "/cl:false:5", "/chunked:false:15", "/clte:true:0"}},
		{"CL+TE on HTTP/1.0", "POST /old HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\nhi" + getB, []string{"/old:true:2"}},
		{"TE on HTTP/1.0 is ignored by net/http, so by us", "POST /old HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n" + getB, []string{"/old:false:0", "/b:false:0"}},
		{"a spoofed marker closes only its own connection", "GET /spoof HTTP/1.1\r\nHost: x\r\nIdemgate-Framing-Conflict: 1\r\n\r\n" + getB, []string{"/spoof:true:0"}},
		{"leading CRLF after a POST", postCL + "\r\n" + getB, []string{"/cl:false:5", "/b:false:0"}},
		{"two equal Content-Lengths are fine", "POST /two HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nhi" + getB, []string{"/two:false:2", "/b:false:0"}},
		{"two different Content-Lengths: net/http refuses", "POST /two HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi" + getB, nil},
		{"TE gzip: net/http refuses", "POST /gz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n" + getB, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr, served := guarded(t, 64<<10)
			resps := exchange(t, addr, tc.raw, 10)
			var got []string
			for _, r := range resps {
				body := bodyOf(r)
				if r.StatusCode == http.StatusOK {
					got = append(got, body[:strings.LastIndexByte(body, ':')])
				}
				if strings.Contains(body, ":true:") && !r.Close {
					t.Errorf("%s answered without Connection: close", body)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("answers %q; want %q", got, tc.want)
			}
			if len(served()) != len(tc.want) {
				t.Errorf("handler ran for %q; want %d requests", served(), len(tc.want))
			}
		})
	}
}

// TestMaxHeaderBytesExact: a head of exactly max_header_bytes is served, one
// byte more gets net/http's 431, without the 4096 bytes of slack that
// MaxHeaderBytes alone allows.
func TestMaxHeaderBytesExact(t *testing.T) {
	t.Parallel()
	const max = 2000
	head := func(n int) string {
		h := "GET /h HTTP/1.1\r\nHost: x\r\nX-Pad: "
		return h + strings.Repeat("p", n-len(h)-4) + "\r\n\r\n"
	}
	for _, tc := range []struct {
		name string
		n    int
		want int
	}{
		{"exactly the limit", max, http.StatusOK},
		{"one over", max + 1, http.StatusRequestHeaderFieldsTooLarge},
		{"within Go's slack", max + 4000, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr, served := guarded(t, max)
			raw := head(tc.n)
			if len(raw) != tc.n {
				t.Fatalf("head is %d bytes; want %d", len(raw), tc.n)
			}
			resps := exchange(t, addr, raw, 1)
			if len(resps) != 1 || resps[0].StatusCode != tc.want {
				t.Fatalf("answers %v; want one %d", resps, tc.want)
			}
			if tc.want != http.StatusOK && len(served()) != 0 {
				t.Errorf("handler ran for %q", served())
			}
		})
	}
}

// TestAnswer431IsNetHTTPs: the Listener's answer to a head over the limit
// is byte for byte the one net/http writes when its own MaxHeaderBytes
// trips, and the connection ends after it the same way.
func TestAnswer431IsNetHTTPs(t *testing.T) {
	t.Parallel()
	read := func(addr string) string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		go io.WriteString(c, headOf("/big", 20000))
		b, err := io.ReadAll(c)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("%s: %v after %q", addr, err, b)
		}
		return string(b)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := &http.Server{Handler: http.NotFoundHandler(), MaxHeaderBytes: 4096}
	go plain.Serve(ln)
	t.Cleanup(func() { plain.Close() })
	addr, _ := guarded(t, 4096)
	want, got := read(ln.Addr().String()), read(addr)
	if want != answer431 || got != want {
		t.Errorf("the Listener answers\n%q\nnet/http answers\n%q\n(answer431 is %q)", got, want, answer431)
	}
}

// TestLimitChangesPerHead: a change of the Limit holds from the next head
// on, on connections open before it too: on one keep-alive connection a
// head of 6,000 bytes is served under 8,000, gets 431 once the limit is
// 5,000 (exactly: 5,000 bytes are served), and a new connection serves it
// again once the limit is 6,000.
func TestLimitChangesPerHead(t *testing.T) {
	t.Parallel()
	limit := NewLimit(8000)
	addr, served := guardedLimit(t, limit)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	send := func(head string) int {
		t.Helper()
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	if got := send(headOf("/a", 6000)); got != http.StatusOK {
		t.Fatalf("6,000 bytes under 8,000: %d", got)
	}
	limit.Set(5000)
	if got := send(headOf("/b", 5000)); got != http.StatusOK {
		t.Fatalf("5,000 bytes under 5,000: %d", got)
	}
	if got := send(headOf("/c", 5001)); got != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("5,001 bytes under 5,000, same connection: %d; want 431", got)
	}
	limit.Set(6000)
	if resps := exchange(t, addr, headOf("/d", 6000), 1); len(resps) != 1 || resps[0].StatusCode != http.StatusOK {
		t.Fatalf("6,000 bytes under 6,000 on a new connection: %v", resps)
	}
	if got := served(); fmt.Sprint(got) != "[/a /b /d]" {
		t.Errorf("handler ran for %q; want [/a /b /d]", got)
	}
}

// TestLimitHeadInProgress: a head keeps the limit in force when it
// started; the next head has the new one.
func TestLimitHeadInProgress(t *testing.T) {
	t.Parallel()
	first, second := headOf("/a", 300), headOf("/b", 300)
	for _, tc := range []struct {
		from, to int
		want     string
	}{
		{1000, 200, first + second[:200] + "<431>"}, // lowered mid-head
		{200, 1000, first[:200] + "<431>"},          // raised mid-head
	} {
		limit := NewLimit(tc.from)
		c := &conn{Conn: &oneByteConn{r: strings.NewReader(first + second), n: 50}, limit: limit}
		var out []byte
		buf := make([]byte, 50)
		for {
			k, err := c.Read(buf)
			if len(out) < 100 && len(out)+k >= 100 {
				limit.Set(tc.to)
			}
			if c.state == stOverflow {
				out = append(append(out, buf[:c.realInLast]...), "<431>"...)
				break
			}
			out = append(out, buf[:k]...)
			if err != nil {
				break
			}
		}
		if string(out) != tc.want {
			t.Errorf("%d to %d mid-head: server reads %q; want %q", tc.from, tc.to, out, tc.want)
		}
	}
}

// TestMaxHeaderBytesMegabyte: ~1 MB of small headers gets 431 from the
// default 64 KiB limit, and the handler never runs; the next connection is
// served.
func TestMaxHeaderBytesMegabyte(t *testing.T) {
	t.Parallel()
	addr, served := guarded(t, 64<<10)
	var b strings.Builder
	b.WriteString("POST /big HTTP/1.1\r\nHost: x\r\n")
	for i := 0; b.Len() < 1<<20; i++ {
		fmt.Fprintf(&b, "X-H%d: v\r\n", i)
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	resps := exchange(t, addr, b.String(), 1)
	if len(resps) != 1 || resps[0].StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("answers %v; want one 431", resps)
	}
	if len(served()) != 0 {
		t.Errorf("handler ran for %q", served())
	}
	if resps := exchange(t, addr, "GET /ok HTTP/1.1\r\nHost: x\r\n\r\n", 1); len(resps) != 1 || resps[0].StatusCode != http.StatusOK {
		t.Errorf("next connection: %v; want 200", resps)
	}
}

// TestUpgradeStopsWatching: after an Upgrade request answered 101, the
// bytes that follow are left alone, even when they look like an oversized
// head or a framing conflict.
func TestUpgradeStopsWatching(t *testing.T) {
	t.Parallel()
	head := "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
	for _, after := range []string{
		strings.Repeat("z", 5000),
		"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	} {
		in := head + after
		for _, n := range []int{1, 7, 4096} {
			c := &conn{Conn: &oneByteConn{r: strings.NewReader(in), n: n}, limit: NewLimit(100)}
			var out []byte
			buf := make([]byte, 13)
			wrote := false
			for {
				k, err := c.Read(buf)
				out = append(out, buf[:k]...)
				if !wrote && strings.Contains(string(out), "\r\n\r\n") {
					// The server answers the head: the client's next bytes
					// come after the 101.
					c.Write([]byte("HTTP/1.1 101 Switching Protocols\r\n\r\n"))
					wrote = true
				}
				if err != nil {
					break
				}
			}
			if string(out) != in {
				t.Errorf("reads of %d: upgraded stream changed: %q", n, out)
			}
		}
	}
}

// TestUpgradeHijacked: through a real server whose handler hijacks the
// connection and answers 101 (as httputil.ReverseProxy does), the bytes
// after it, an oversized "head" and a framing conflict among them, reach
// the handler untouched.
func TestUpgradeHijacked(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	after := strings.Repeat("z", 10000) + "\r\nPOST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
	got := make(chan string, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Check(w, r)
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
		brw.Flush()
		b := make([]byte, len(after))
		_, err = io.ReadFull(brw, b)
		got <- fmt.Sprint(string(b) == after, err)
	}), MaxHeaderBytes: serverMaxHeaderBytes}
	go srv.Serve(NewListener(ln, NewLimit(4096)))
	t.Cleanup(func() { srv.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET /up HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("answer %v %v; want 101", res, err)
	}
	io.WriteString(c, after)
	select {
	case g := <-got:
		if g != "true <nil>" {
			t.Errorf("the handler read the bytes after the 101 changed (equal, error: %s)", g)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not read the bytes after the 101")
	}
}

// TestUpgradeRefusedStaysWatched: an Upgrade request the server does not
// upgrade (any answer but 101) leaves the connection HTTP/1, watched: the
// next head over the limit on it gets 431, as on any other.
func TestUpgradeRefusedStaysWatched(t *testing.T) {
	t.Parallel()
	addr, served := guarded(t, 4096)
	upgrade := "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
	resps := exchange(t, addr, upgrade+headOf("/big", 4097), 2)
	if len(resps) != 2 || resps[0].StatusCode != http.StatusOK || resps[1].StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("answers %v; want 200 and 431", resps)
	}
	if got := served(); fmt.Sprint(got) != "[/ws]" {
		t.Errorf("handler ran for %q; want [/ws]", got)
	}
}

// oneByteConn delivers src in reads of at most n bytes.
type oneByteConn struct {
	net.Conn
	r io.Reader
	n int
}

func (c *oneByteConn) Read(p []byte) (int, error)  { return c.r.Read(p[:min(len(p), c.n)]) }
func (c *oneByteConn) Write(p []byte) (int, error) { return len(p), nil }

// transform runs in through a watched conn that receives it in reads of
// at most n bytes and returns what the server would read.
func transform(t testing.TB, in string, max, n int) string {
	c := &conn{Conn: &oneByteConn{r: strings.NewReader(in), n: n}, limit: NewLimit(max)}
	var out []byte
	buf := make([]byte, 13)
	for len(out) < len(in)+len(markerLine)+1<<16 {
		k, err := c.Read(buf)
		if c.state == stOverflow {
			return string(append(out, buf[:c.realInLast]...)) + "<431>"
		}
		out = append(out, buf[:k]...)
		if err != nil {
			break
		}
	}
	return string(out)
}

// TestTransform checks the byte stream the server reads, whatever the
// fragmentation.
func TestTransform(t *testing.T) {
	t.Parallel()
	clte := "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain", "GET / HTTP/1.1\r\nA: b\r\n\r\n", "GET / HTTP/1.1\r\nA: b\r\n\r\n"},
		{"marker after the deciding line", clte, "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n" + string(markerLine) + "\r\n0\r\n\r\n"},
		{"after a chunked body", "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: 1\r\n\r\n" + clte,
			"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nT: 1\r\n\r\n" + "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n" + string(markerLine) + "\r\n0\r\n\r\n"},
		{"a body that looks like CL+TE is a body", "POST / HTTP/1.1\r\nContent-Length: 71\r\n\r\n" + clte, "POST / HTTP/1.1\r\nContent-Length: 71\r\n\r\n" + clte},
		{"bad Content-Length", "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\nhello", "POST / HTTP/1.1\r\nContent-Length: +5\r\n" + string(markerLine) + "\r\nhello"},
		{"h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + clte, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + clte},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.name == "a body that looks like CL+TE is a body" && len(clte) != 71 {
				t.Fatalf("len(clte) = %d", len(clte))
			}
			for _, n := range []int{1, 2, 3, 7, 64, 4096} {
				if got := transform(t, tc.in, 1<<16, n); got != tc.want {
					t.Errorf("reads of %d: server reads\n%q\nwant\n%q", n, got, tc.want)
				}
			}
		})
	}
}

func FuzzTransform(f *testing.F) {
	f.Add("POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n", 64)
	f.Add("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x\r\nabc\r\n0\r\nT: 1\r\n\r\n", 30)
	f.Fuzz(func(t *testing.T, in string, max int) {
		max = max%200 + 20
		whole := transform(t, in, max, 4096)
		for _, n := range []int{1, 5} {
			if got := transform(t, in, max, n); got != whole {
				t.Fatalf("reads of %d: %q; reads of 4096: %q", n, got, whole)
			}
		}
		if strings.Count(whole, string(markerLine)) == strings.Count(in, string(markerLine)) && !strings.HasSuffix(whole, "<431>") && whole != in {
			t.Fatalf("stream changed without a marker or filler: %q -> %q", in, whole)
		}
	})
}

// TestOverflowPoint: the server gets exactly max bytes of an oversized head,
// then filler; heads after a body are counted afresh.
func TestOverflowPoint(t *testing.T) {
	t.Parallel()
	ok := "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc" // head of 38 bytes
	big := "GET / HTTP/1.1\r\nA: " + strings.Repeat("b", 30) + "\r\n\r\n"
	for _, n := range []int{1, 4, 4096} {
		if got, want := transform(t, ok+ok+big, 38, n), ok+ok+big[:38]+"<431>"; got != want {
			t.Errorf("reads of %d: %q; want %q", n, got, want)
		}
	}
}

// BenchmarkOverflow is the cost of a head over the limit: 64 KiB + 1
// bytes on a new connection to a server whose own limit is 16 MiB, until
// the 431 is read.
func BenchmarkOverflow(b *testing.B) {
	addr, _ := guarded(b, 64<<10)
	raw := headOf("/big", 64<<10+1)
	b.ReportAllocs()
	for b.Loop() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		go io.WriteString(c, raw)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			b.Fatal(res, err)
		}
		c.Close()
	}
}

// BenchmarkRead is the cost the Listener adds per request: a typical
// keyed POST head and body through a watched conn.
func BenchmarkRead(b *testing.B) {
	req := "POST /ucp/v1/carts HTTP/1.1\r\nHost: shop.example\r\nUser-Agent: bench/1.0\r\nAccept: */*\r\n" +
		"Content-Type: application/json\r\nIdempotency-Key: 0123456789abcdef\r\nUCP-Agent: agent-7\r\n" +
		"Content-Length: 64\r\n\r\n" + strings.Repeat("x", 64)
	src := strings.NewReader(req)
	c := &conn{Conn: &oneByteConn{r: src, n: 4096}, limit: NewLimit(64 << 10)}
	buf := make([]byte, 4096)
	b.ReportAllocs()
	b.SetBytes(int64(len(req)))
	for b.Loop() {
		src.Reset(req)
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
	}
}
