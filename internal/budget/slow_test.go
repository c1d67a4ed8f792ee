package budget

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// slowServer is a loopback server whose handler reads bodies through a
// Budget the way the proxy does. The test names each request's client in
// X-Test-Client (a real proxy takes it from the connection).
func slowServer(t *testing.T, b *Budget, timeout time.Duration) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		k := key(r.Header.Get("X-Test-Client"))
		body, err := b.ReadBody(k, r, &ReadOptions{Limit: 2 << 20, Deadline: start.Add(timeout), Writer: w})
		switch {
		case errors.Is(err, ErrTimeout):
			w.Header().Set("Connection", "close")
			http.Error(w, "request_timeout", http.StatusRequestTimeout)
			return
		case errors.Is(err, ErrOverloaded):
			http.Error(w, "overloaded", http.StatusServiceUnavailable)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		defer body.Free()
		fmt.Fprintf(w, "%d", body.Len())
	}))
	srv.Config.ReadHeaderTimeout = 10 * time.Second
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// TestSlowBodiesDoNotStarve is issue 15's attack over a real loopback
// server: 16 connections announce 1 MiB (8 by Content-Length, 8 as a chunked
// body) and send one byte. Under a 4 MiB budget with a 1 MiB share per
// client, that used to reserve 16 MiB up front; now they hold eagerBytes
// each, every other client's body is read meanwhile, and the slow ones get
// 408 once request_body_timeout has passed.
func TestSlowBodiesDoNotStarve(t *testing.T) {
	t.Parallel()
	const (
		slow    = 16
		fast    = 24
		timeout = 3 * time.Second
	)
	b := New(4<<20, 1<<20)
	srv := slowServer(t, b, timeout)
	addr := srv.Listener.Addr().String()

	slowKey := key("203.0.113.1")
	conns := make([]net.Conn, slow)
	began := time.Now()
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		head := "POST / HTTP/1.1\r\nHost: x\r\nX-Test-Client: 203.0.113.1\r\nContent-Length: 1048576\r\n\r\na"
		if i%2 == 1 {
			head = "POST / HTTP/1.1\r\nHost: x\r\nX-Test-Client: 203.0.113.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n"
		}
		if _, err := io.WriteString(c, head); err != nil {
			t.Fatal(err)
		}
		conns[i] = c
	}
	// Wait until every slow body is inside the budget (bounded polling).
	for deadline := time.Now().Add(5 * time.Second); b.UsedBy(slowKey) != slow*eagerBytes; {
		if time.Now().After(deadline) {
			t.Fatalf("slow bodies hold %d; want %d", b.UsedBy(slowKey), slow*eagerBytes)
		}
		time.Sleep(time.Millisecond) // polling a condition, not timing the test
	}

	// Other clients' keyed bodies are read at once.
	payload := bytes.Repeat([]byte("[0,"), 30_000)
	var wg sync.WaitGroup
	errs := make(chan error, fast)
	for i := range fast {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(payload))
			req.Header.Set("X-Test-Client", netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}).String())
			resp, err := srv.Client().Do(req)
			if err != nil {
				errs <- err
				return
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(got) != fmt.Sprint(len(payload)) {
				errs <- fmt.Errorf("fast client %d: %d %q", i, resp.StatusCode, got)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if since := time.Since(began); since >= timeout {
		t.Fatalf("fast clients took until %v, past the slow bodies' timeout: the test proves nothing", since)
	}

	// Every slow connection gets 408 after the deadline, not before.
	var got408 int
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Errorf("slow connection %d: %v", i, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusRequestTimeout {
			got408++
		}
	}
	if got408 != slow {
		t.Errorf("slow connections answered 408: %d; want %d", got408, slow)
	}
	if since := time.Since(began); since < timeout {
		t.Errorf("slow connections answered after %v; want no sooner than %v", since, timeout)
	}
	for deadline := time.Now().Add(5 * time.Second); b.Used() != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("budget used after every request = %d; want 0", b.Used())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPerClientShare: one client's bodies fill its share and get
// overloaded; another client is still served.
func TestPerClientShare(t *testing.T) {
	t.Parallel()
	b := New(4*eagerBytes, 2*eagerBytes)
	srv := slowServer(t, b, 5*time.Second)
	hog := key("203.0.113.2")
	var conns []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nX-Test-Client: 203.0.113.2\r\nContent-Length: 100000\r\n\r\na")
		conns = append(conns, c)
	}
	for deadline := time.Now().Add(5 * time.Second); b.UsedBy(hog) != 2*eagerBytes; {
		if time.Now().After(deadline) {
			t.Fatalf("hog holds %d; want %d", b.UsedBy(hog), 2*eagerBytes)
		}
		time.Sleep(time.Millisecond)
	}
	for _, tc := range []struct {
		client string
		want   int
	}{
		{"203.0.113.2", http.StatusServiceUnavailable},
		{"198.51.100.1", http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("hello"))
		req.Header.Set("X-Test-Client", tc.client)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("client %s: %d; want %d", tc.client, resp.StatusCode, tc.want)
		}
	}
}
