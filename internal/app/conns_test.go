package app

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testutil"
)

// TestMaxConnections: with max_connections 4, four idle connections fill
// the public listener: a fifth is not served (it waits in the accept
// queue) until one of them closes, and the admin listener, with its own
// cap, keeps answering meanwhile.
func TestMaxConnections(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "up") }))
	t.Cleanup(up.Close)
	a, err := New(e2eConfig(t, `
upstream: {url: "`+up.URL+`"}
edge_limit: {rate: 0}
max_connections: 4
`), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	lns, err := Listen("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	serveUntilCleanup(t, a, lns)
	addr, admin := lns.Public.Addr().String(), lns.Admin.Addr().String()
	// Each idle connection has sent half a head: it holds its slot.
	var idle []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\n")
		idle = append(idle, c)
	}
	fifth, err := net.Dial("tcp", addr) // the kernel completes the handshake
	if err != nil {
		t.Fatal(err)
	}
	defer fifth.Close()
	io.WriteString(fifth, "GET /fifth HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	br := bufio.NewReader(fifth)
	fifth.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the fifth connection was served while four were open")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("the fifth connection: %v; want it waiting", err)
	}

	res, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + admin + "/healthz")
	if err != nil {
		t.Fatalf("admin listener while the public one is full: %v", err)
	}
	res.Body.Close()

	idle[0].Close()
	fifth.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the fifth connection after one closed: %v", err)
	}
	b, _ := io.ReadAll(got.Body)
	if got.StatusCode != http.StatusOK || !strings.Contains(string(b), "up") {
		t.Errorf("the fifth connection: %d %q; want the upstream's 200", got.StatusCode, b)
	}
}

// TestMaxConnectionsReloadedBeforeServe: a reload of max_connections that
// lands before Serve wraps a listener (as the watcher's first read may
// before tls.http_listen's listener is wrapped) gives that listener the
// reloaded cap, not the one the process started with.
func TestMaxConnectionsReloadedBeforeServe(t *testing.T) {
	t.Parallel()
	a, err := New(e2eConfig(t, `
upstream: {url: "http://127.0.0.1:1"}
edge_limit: {rate: 0}
max_connections: 4
`), Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	next := cloneConfig(t, a.liveConfig())
	next.MaxConnections = 2
	data, err := next.EffectiveYAML()
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	a.applyConfig(data, nil)
	if got := a.liveConfig().MaxConnections; got != 2 {
		a.Close()
		t.Fatalf("live max_connections after the reload = %d; want 2", got)
	}
	lns, err := Listen("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	serveUntilCleanup(t, a, lns)
	testutil.Eventually(t, 10*time.Second, "serving", a.ready.Load)
	a.reload.mu.Lock()
	var limits []int
	for _, l := range a.conns {
		limits = append(limits, l.Limit())
	}
	a.reload.mu.Unlock()
	if len(limits) != 2 || limits[0] != 2 || limits[1] != 2 {
		t.Errorf("listeners' max_connections = %v; want [2 2], the reloaded value", limits)
	}
}
