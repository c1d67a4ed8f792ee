package redislimiter_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/limiter"
	"github.com/idemgate/idemgate/limiter/redislimiter"
)

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// TestMain silences go-redis's process-wide logger, which the dead-server
// tests would flood with dial errors, and checks that no test leaves a
// goroutine behind (deny-cache sweepers, connections).
func TestMain(m *testing.M) {
	redis.SetLogger(discardLogger{})
	goleak.VerifyTestMain(m)
}

// Tests against real servers read their addresses from the environment
// (scripts/redis-test.sh writes them). Without them the tests skip, unless
// IDEMGATE_REQUIRE_REDIS=1, as in `make test`, where they fail.
type topology struct {
	name string
	env  string
	opts func(v string) redisstore.ClientOptions
}

var topologies = []topology{
	{"standalone", "IDEMGATE_TEST_REDIS_ADDR", func(v string) redisstore.ClientOptions {
		return redisstore.ClientOptions{Addrs: []string{v}}
	}},
	{"cluster", "IDEMGATE_TEST_REDIS_CLUSTER_ADDRS", func(v string) redisstore.ClientOptions {
		return redisstore.ClientOptions{Addrs: strings.Split(v, ",")}
	}},
}

// testTimeout is generous: tests run in parallel under -race on small
// machines, and a dead server fails fast anyway.
const testTimeout = 2 * time.Second

// newClient returns a client for topo, closed when the test ends, or skips
// (fails under IDEMGATE_REQUIRE_REDIS=1) when its variable is unset.
func newClient(t testing.TB, topo topology) redis.UniversalClient {
	t.Helper()
	v := os.Getenv(topo.env)
	if v == "" {
		msg := topo.env + " is not set: start Redis with `scripts/redis-test.sh start DIR` and export `scripts/redis-test.sh env DIR`"
		if os.Getenv("IDEMGATE_REQUIRE_REDIS") == "1" {
			t.Fatalf("IDEMGATE_REQUIRE_REDIS=1 but %s", msg)
		}
		t.Skip(msg)
	}
	o := topo.opts(v)
	o.Timeout = testTimeout
	c, err := redisstore.NewClient(o)
	if err != nil {
		t.Fatalf("NewClient = %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// eachTopology runs fn as a parallel subtest per topology.
func eachTopology(t *testing.T, fn func(t *testing.T, c redis.UniversalClient)) {
	for _, topo := range topologies {
		t.Run(topo.name, func(t *testing.T) {
			t.Parallel()
			fn(t, newClient(t, topo))
		})
	}
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
