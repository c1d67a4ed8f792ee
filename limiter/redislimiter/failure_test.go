package redislimiter_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/limiter"
	"github.com/idemgate/idemgate/limiter/redislimiter"
)

// logBuffer collects JSON log lines; safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines returns the messages of the lines logged at level.
func (l *logBuffer) lines(t *testing.T, level string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["level"] == level {
			out = append(out, m)
		}
	}
	return out
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

func clientFor(t *testing.T, addr string, timeout time.Duration) redis.UniversalClient {
	c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{addr}, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRedisDown: with Redis unreachable, requests pass at once, unlimited,
// counted, and the outage is logged once a minute; Redis is asked again once
// per retry interval.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	clk := newClock()
	b := newBackend(t, clientFor(t, testutil.DeadAddr(t), 200*time.Millisecond), nil, redislimiter.Options{Logger: logs.logger()})
	edge := newEdge(t, b, limiter.EdgeOptions{Rate: 1, Burst: 0})
	route := newRoute(t, b, "route:w", limiter.RouteOptions{Algorithm: limiter.Window, Requests: 1, Per: time.Minute})
	a := key("192.0.2.1")

	start := time.Now()
	for i := range 500 {
		for _, l := range []*redislimiter.Limiter{edge, route} {
			if d := l.AllowContext(ctx, a, clk.now()); d != (limiter.Decision{OK: true}) {
				t.Fatalf("request %d to %s with Redis down = %+v; want a bare pass (Limit 0: no headers)", i, l.Name(), d)
			}
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("1,000 decisions with Redis down took %v; want well under 1s", took)
	}
	if got := b.Fallbacks(); got != 1000 {
		t.Errorf("Backend.Fallbacks() = %d; want 1000", got)
	}
	if e, r := edge.Fallbacks(), route.Fallbacks(); e != 500 || r != 500 {
		t.Errorf("Limiter.Fallbacks() = %d, %d; want 500 each", e, r)
	}
	if w := logs.lines(t, "WARN"); len(w) != 1 {
		t.Fatalf("%d warnings; want 1: %v", len(w), w)
	} else if w[0][`error`] == "" || w[0]["fallbacks_total"] != 1.0 {
		t.Errorf("warning = %v; want the error and fallbacks_total 1", w[0])
	}
	// Each retry interval one request probes Redis (and fails again);
	// within the minute nothing more is logged, after it one more line.
	clk.advance(redislimiter.DefaultRetryInterval)
	edge.AllowContext(ctx, a, clk.now())
	if w := logs.lines(t, "WARN"); len(w) != 1 {
		t.Errorf("%d warnings after a probe within the minute; want 1", len(w))
	}
	clk.advance(time.Minute)
	edge.AllowContext(ctx, a, clk.now())
	if w := logs.lines(t, "WARN"); len(w) != 2 {
		t.Errorf("%d warnings a minute later; want 2", len(w))
	}
}

// TestRedisHangs: a Redis that accepts connections and never answers costs
// one client timeout, then nothing until the retry interval has passed.
func TestRedisHangs(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	held := make(chan net.Conn, 16)
	conns.Add(1)
	go func() {
		defer conns.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held <- c // read nothing, answer nothing
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Wait()
		close(held)
		for c := range held {
			c.Close()
		}
	})
	const timeout = 150 * time.Millisecond
	clk := newClock()
	b := newBackend(t, clientFor(t, ln.Addr().String(), timeout), nil, redislimiter.Options{})
	l := newEdge(t, b, nginxDefault)
	a := key("192.0.2.1")
	start := time.Now()
	if d := l.AllowContext(ctx, a, clk.now()); !d.OK {
		t.Errorf("first decision = %+v; want passed", d)
	}
	if took := time.Since(start); took < timeout || took > 3*timeout {
		t.Errorf("first decision took %v; want about the client timeout %v", took, timeout)
	}
	start = time.Now()
	for range 100 {
		l.AllowContext(ctx, a, clk.now())
	}
	if took := time.Since(start); took > timeout/2 {
		t.Errorf("100 decisions within the retry interval took %v; want no Redis call", took)
	}
	if got := l.Fallbacks(); got != 101 {
		t.Errorf("Fallbacks() = %d; want 101", got)
	}
}

// TestRedisRecovers: after an outage the limiter limits again within one
// retry interval, with the state Redis kept.
func TestRedisRecovers(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	g := testutil.NewGate(t, addr)
	var logs logBuffer
	clk := newClock()
	b := newBackend(t, clientFor(t, g.Addr(), testTimeout), clk, redislimiter.Options{Logger: logs.logger(), RetryInterval: time.Second})
	l := newEdge(t, b, limiter.EdgeOptions{Rate: 1, Burst: 1})
	a := key("192.0.2.1")
	if got := burst(l, clk, a, 2); got != 2 {
		t.Fatalf("burst of 2: %d passed; want 2", got)
	}
	g.Shut()
	if d := l.AllowContext(ctx, a, clk.now()); d != (limiter.Decision{OK: true}) {
		t.Errorf("while Redis is away = %+v; want a bare pass", d)
	}
	g.Open()
	if d := l.AllowContext(ctx, a, clk.now()); d != (limiter.Decision{OK: true}) {
		t.Errorf("back, within the retry interval = %+v; want a bare pass (not asked)", d)
	}
	clk.advance(time.Second)
	// The first request after the interval asks Redis, which kept the
	// state: 1 s later one request's worth has drained, not two.
	if d := l.AllowContext(ctx, a, clk.now()); !d.OK || d.Limit != 2 || d.Remaining != 0 {
		t.Errorf("after the retry interval = %+v; want limited again: passed, Limit 2, Remaining 0", d)
	}
	if got := l.Fallbacks(); got != 2 {
		t.Errorf("Fallbacks() = %d; want 2", got)
	}
	if w, i := logs.lines(t, "WARN"), logs.lines(t, "INFO"); len(w) != 1 || len(i) != 1 {
		t.Errorf("logged %d warnings and %d infos; want 1 of each (down, back)", len(w), len(i))
	}
}
