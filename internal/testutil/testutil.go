// Package testutil holds the small helpers several packages' tests share: a
// settable clock, a goroutine-safe buffer for captured logs, a dead address,
// a silent go-redis logger, a metric reader, Eventually (polling with a
// deadline), Gate (a TCP forwarder to shut and open), HeldUpstream (an HTTP
// upstream that holds requests until opened) and LuaReplyCodes (embedded
// Lua's reply codes against their Go constants).
package testutil

import (
	"bytes"
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Clock is a fake clock that moves only when told to. It is safe for
// concurrent use; its zero value starts at the zero time.
type Clock struct {
	mu  sync.Mutex // protects now
	now time.Time
}

// NewClock returns a Clock set to t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers, for logs that
// servers write while a test reads them.
type SyncBuffer struct {
	mu sync.Mutex // protects b
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// DeadAddr returns a loopback address that refuses connections: listened
// on, then closed (caddy's retries_test.go does the same). It never
// returns an address twice in a process: the kernel may hand a port just
// closed out again, and a test that asks for two (a listen and an
// admin_listen) got the same one (a clean-clone CI run drew it).
func DeadAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if _, dup := handedOut.LoadOrStore(addr, struct{}{}); !dup {
			return addr
		}
	}
	t.Fatal("DeadAddr: 100 ports in a row were handed out before")
	return ""
}

// handedOut holds the addresses DeadAddr returned.
var handedOut sync.Map

// DiscardLogger is a go-redis logger that writes nothing, for tests whose
// dead servers would flood go-redis's global logger:
// redis.SetLogger(testutil.DiscardLogger{}).
type DiscardLogger struct{}

// Printf discards its arguments.
func (DiscardLogger) Printf(context.Context, string, ...any) {}

// Gathered returns the value of the counter or gauge series of family name
// in g whose labels include labels (name, value pairs), or -1 when there is
// none.
func Gathered(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}
