package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// dropUpstream is a raw loopback upstream: it answers GET /warm once warm
// requests are running at once (so the proxy's Transport ends up with
// that many idle keep-alive connections), and reads every other request,
// counts it and closes its connection without answering.
type dropUpstream struct {
	addr string
	mu   sync.Mutex // protects seen, warm
	seen map[string]int
	warm int
	all  chan struct{} // closed when warm requests arrived
}

func newDropUpstream(t *testing.T, warm int) *dropUpstream {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &dropUpstream{addr: l.Addr().String(), seen: map[string]int{}, all: make(chan struct{})}
	var wg sync.WaitGroup
	var conns sync.Map
	t.Cleanup(func() {
		l.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Store(c, true)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					if req.Method == "GET" && req.URL.Path == "/warm" {
						u.mu.Lock()
						if u.warm++; u.warm == warm {
							close(u.all)
						}
						u.mu.Unlock()
						select {
						case <-u.all:
						case <-time.After(5 * time.Second):
						}
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
						continue
					}
					u.mu.Lock()
					u.seen[req.Method+" "+req.URL.RequestURI()]++
					u.mu.Unlock()
					return // ran it; close without answering
				}
			}()
		}
	}()
	return u
}

func (u *dropUpstream) count(method, uri string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[method+" "+uri]
}

// TestNoWriteResent is issue 13's finding 1: a write the client sent once
// reaches the upstream once, whether or not a route matched it, whether or
// not it carries a key, even when the Transport holds several idle
// keep-alive connections that it could resend it on (net/http
// isReplayable: a nil body with Idempotency-Key or X-Idempotency-Key).
func TestNoWriteResent(t *testing.T) {
	t.Parallel()
	const idle = 8
	cases := []struct {
		name, method, path string
		hdr                []string
	}{
		{"unmatched POST with key", "POST", "/ucp/v1/orders/7/cancel", []string{"Idempotency-Key", "k1"}},
		{"unmatched POST with X-Idempotency-Key", "POST", "/ucp/v1/orders/8/cancel", []string{"X-Idempotency-Key", "k2"}},
		{"bodiless DELETE with key", "DELETE", "/ucp/v1/carts/9", []string{"Idempotency-Key", "k3"}},
		{"bodiless DELETE", "DELETE", "/ucp/v1/carts/10", nil},
		{"keyed route, no body", "POST", "/ucp/v1/carts", []string{"Idempotency-Key", "k4"}},
		{"PUT on a route, not keyed", "PUT", "/ucp/v1/carts/11", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newDropUpstream(t, idle)
			tp := newTestProxy(t, "http://"+up.addr, nil)
			var wg sync.WaitGroup
			for range idle {
				wg.Go(func() {
					if r := tp.do(t, "GET", "/warm", "", ""); r.status != 200 {
						t.Errorf("warm-up = %v", r)
					}
				})
			}
			wg.Wait()
			req, err := http.NewRequest(tc.method, tp.URL+tc.path, http.NoBody)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				req.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			res, err := tp.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusBadGateway {
				t.Errorf("%s %s = %d; want 502", tc.method, tc.path, res.StatusCode)
			}
			if n := up.count(tc.method, tc.path); n != 1 {
				t.Errorf("upstream ran %s %s %d times; want exactly 1", tc.method, tc.path, n)
			}
		})
	}
}
