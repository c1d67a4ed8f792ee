package redislimiter_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/limiter"
	"github.com/idemgate/idemgate/limiter/redislimiter"
)

// TestMain silences go-redis's process-wide logger, which the dead-server
// tests would flood with dial errors, and checks that no test leaves a
// goroutine behind (deny-cache sweepers, connections).
func TestMain(m *testing.M) {
	redis.SetLogger(testutil.DiscardLogger{})
	goleak.VerifyTestMain(m)
}

// testTimeout is generous: tests run in parallel under -race on small
// machines, and a dead server fails fast anyway.
const testTimeout = 2 * time.Second

// newClient returns a client for topo, closed when the test ends, or skips
// (see redistest).
func newClient(t testing.TB, topo redistest.Topology) redis.UniversalClient {
	t.Helper()
	s := topo.Find(t)
	c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: s.Addrs, MasterName: s.MasterName, ClusterMode: s.Cluster, Timeout: testTimeout})
	if err != nil {
		t.Fatalf("NewClient = %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// eachTopology runs fn as a parallel subtest per topology.
func eachTopology(t *testing.T, fn func(t *testing.T, c redis.UniversalClient)) {
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) { fn(t, newClient(t, topo)) })
}

// newPrefix returns a key prefix no other test or run uses.
func newPrefix() string {
	var b [6]byte
	rand.Read(b[:])
	return "idemgate-rltest:" + hex.EncodeToString(b[:]) + ":"
}

// clock is the fake time of a test: the scripts' time (µs) and the local
// time passed to AllowContext move together.
type clock struct{ us atomic.Int64 }

// t0 is the fake clocks' origin: a real date, so that the microsecond
// numbers are as large as in production.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newClock() *clock {
	c := &clock{}
	c.us.Store(t0.UnixMicro())
	return c
}

func (c *clock) micros() int64           { return c.us.Load() }
func (c *clock) now() time.Time          { return time.UnixMicro(c.us.Load()) }
func (c *clock) advance(d time.Duration) { c.us.Add(int64(d / time.Microsecond)) }

// newBackend returns a Backend on c with a fresh prefix, on clk's time when
// clk is not nil.
func newBackend(t testing.TB, c redis.UniversalClient, clk *clock, o redislimiter.Options) *redislimiter.Backend {
	t.Helper()
	if o.KeyPrefix == "" {
		o.KeyPrefix = newPrefix()
	}
	b, err := redislimiter.New(c, o)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	if clk != nil {
		redislimiter.UseClock(b, clk.micros)
	}
	return b
}

func newEdge(t testing.TB, b *redislimiter.Backend, o limiter.EdgeOptions) *redislimiter.Limiter {
	t.Helper()
	l, err := b.NewEdge("edge", o)
	if err != nil {
		t.Fatalf("NewEdge(%+v) = %v", o, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func newRoute(t testing.TB, b *redislimiter.Backend, name string, o limiter.RouteOptions) *redislimiter.Limiter {
	t.Helper()
	l, err := b.NewRoute(name, o)
	if err != nil {
		t.Fatalf("NewRoute(%+v) = %v", o, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func key(s string) limiter.Key { return limiter.Bucket(netip.MustParseAddr(s)) }

var ctx = context.Background()
