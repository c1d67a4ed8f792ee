package app

// max_header_bytes reloads live (issue 29): over HTTP/1.1 from the next
// head on, on connections open before the reload too; over HTTP/2 from the
// next connection on, the old ones sent GOAWAY. The plain listener's side
// runs under load in TestReloadUnderLoadEveryFormerRestartKey.

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// rawConn is an HTTP/1.1 keep-alive connection written raw.
type rawConn struct {
	c  net.Conn
	br *bufio.Reader
}

func dialRaw(t *testing.T, dial func() (net.Conn, error)) *rawConn {
	t.Helper()
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &rawConn{c: c, br: bufio.NewReader(c)}
}

// send writes head and returns the answer's status; 0: the connection
// ended without one.
func (r *rawConn) send(head string) int {
	go io.WriteString(r.c, head)
	res, err := http.ReadResponse(r.br, nil)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// setMaxHeaderBytes reloads a's config with max_header_bytes n.
func setMaxHeaderBytes(t *testing.T, a *App, n int) {
	t.Helper()
	next := cloneConfig(t, a.liveConfig())
	next.MaxHeaderBytes = n
	data, err := next.EffectiveYAML()
	if err != nil {
		t.Fatal(err)
	}
	a.applyConfig(data, nil)
	if got := a.liveConfig().MaxHeaderBytes; got != n {
		t.Fatalf("max_header_bytes after the reload = %d; want %d", got, n)
	}
}

// awaitGoAway reads h's frames until a GOAWAY (true) or the connection's
// end (false).
func (h *h2Conn) awaitGoAway() bool {
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return false
		}
		if _, ok := f.(*http2.GoAwayFrame); ok {
			return true
		}
	}
}

// TestMaxHeaderBytesReloadHTTP2: on the TLS listener, while eight HTTP/2
// clients send requests, max_header_bytes is lowered from 65,536 to 16,384
// and raised to 32,768. No request fails; each new HTTP/2 connection
// advertises the limit in force and holds it exactly (a header list of
// the limit served, one byte more 431); a connection opened before a
// reload gets GOAWAY; and an HTTP/1.1 connection opened before the reload
// has the new limit from its next head.
func TestMaxHeaderBytesReloadHTTP2(t *testing.T) {
	t.Parallel()
	fa := startFramingApp(t, true)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: fa.roots, ServerName: "localhost"}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var h2 atomic.Int64
	ld := startLoad(8, 4*time.Millisecond, func(w, i int) (bool, string) {
		res, err := client.Get(fmt.Sprintf("https://%s/load-%d-%d", fa.addr, w, i))
		if err != nil {
			return false, fmt.Sprintf("GET = %v", err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.ProtoMajor == 2 {
			h2.Add(1)
		}
		return res.StatusCode == http.StatusOK, fmt.Sprintf("GET = %v", res)
	})
	dialTLS1 := func() (net.Conn, error) {
		return tls.Dial("tcp", fa.addr, &tls.Config{RootCAs: fa.roots, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	}
	// exact checks that a new HTTP/2 connection advertises n and holds it.
	exact := func(n int) {
		t.Helper()
		for _, tc := range []struct{ size, want int }{{n, http.StatusOK}, {n + 1, http.StatusRequestHeaderFieldsTooLarge}} {
			h := fa.dialH2(t)
			if got := h.request(1, h2Fields(t, fmt.Sprintf("/h2-%d-%d", n, tc.size), tc.size), ""); got != tc.want {
				t.Errorf("limit %d, a new connection, a header list of %d: status %d; want %d", n, tc.size, got, tc.want)
			}
			if h.maxHeaderList != uint32(n) {
				t.Errorf("limit %d: SETTINGS_MAX_HEADER_LIST_SIZE = %d", n, h.maxHeaderList)
			}
		}
	}
	time.Sleep(200 * time.Millisecond) // traffic before the reloads
	exact(65536)
	for _, n := range []int{16 << 10, 32 << 10} {
		old := fa.dialH2(t)
		if got := old.request(1, h2Fields(t, fmt.Sprintf("/old-%d", n), 1000), ""); got != http.StatusOK {
			t.Fatalf("before the reload to %d: status %d", n, got)
		}
		h1 := dialRaw(t, dialTLS1)
		if got := h1.send(h1Head(t, "/h1-before", 1000)); got != http.StatusOK {
			t.Fatalf("HTTP/1.1 before the reload to %d: status %d", n, got)
		}
		setMaxHeaderBytes(t, fa.app, n)
		if !old.awaitGoAway() {
			t.Errorf("reload to %d: the HTTP/2 connection opened before it got no GOAWAY", n)
		}
		exact(n)
		if got := h1.send(h1Head(t, "/h1-at", n)); got != http.StatusOK {
			t.Errorf("reload to %d: HTTP/1.1 head of %d on a connection opened before it: status %d; want 200", n, n, got)
		}
		if got := h1.send(h1Head(t, "/h1-over", n+1)); got != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("reload to %d: HTTP/1.1 head of %d on a connection opened before it: status %d; want 431", n, n+1, got)
		}
		time.Sleep(100 * time.Millisecond) // traffic on the new limit
	}
	ld.stop(t, fmt.Sprintf("requests (%d over HTTP/2) across 2 reloads", h2.Load()))
	if h2.Load() == 0 {
		t.Error("no request went over HTTP/2")
	}
}

// TestUpgradeThroughProxy: an Upgrade answered 101 by the upstream, through
// the proxy's hijack, carries the bytes after it both ways untouched, well
// over max_header_bytes and without a line end (the listener stops
// watching at the 101; until then it watches the connection as HTTP/1).
func TestUpgradeThroughProxy(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		brw.Flush()
		io.Copy(c, brw) // echo
	}))
	t.Cleanup(up.Close)
	a, err := New(e2eConfig(t, `upstream: {url: "`+up.URL+`"}
max_header_bytes: 4096
edge_limit: {rate: 0}
`), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(serveTestApp(t, a), "http://")
	c := dialRaw(t, func() (net.Conn, error) { return net.Dial("tcp", addr) })
	go io.WriteString(c.c, "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	res, err := http.ReadResponse(c.br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("answer %v %v; want 101", res, err)
	}
	payload := strings.Repeat("z", 100_000)
	go io.WriteString(c.c, payload)
	back := make([]byte, len(payload))
	if _, err := io.ReadFull(c.br, back); err != nil || string(back) != payload {
		t.Errorf("echoed %d bytes, equal %v, %v", len(back), string(back) == payload, err)
	}
}
