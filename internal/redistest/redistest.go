// Package redistest finds the real Redis servers tests run against:
// scripts/redis-test.sh starts them (a standalone server, a 3-master
// Cluster and a Sentinel set-up) and names them in environment variables.
// Without the variables a test skips, unless IDEMGATE_REQUIRE_REDIS=1 (as
// in `make test`), where it fails: the Redis suites cannot be skipped by
// accident in CI.
package redistest

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"
)

// The environment variables scripts/redis-test.sh sets.
const (
	addrEnv           = "IDEMGATE_TEST_REDIS_ADDR"
	clusterAddrsEnv   = "IDEMGATE_TEST_REDIS_CLUSTER_ADDRS"
	sentinelAddrsEnv  = "IDEMGATE_TEST_REDIS_SENTINEL_ADDRS"
	sentinelMasterEnv = "IDEMGATE_TEST_REDIS_SENTINEL_MASTER"
	requireEnv        = "IDEMGATE_REQUIRE_REDIS"
)

// Topology is one of the Redis set-ups the tests run against.
type Topology int

// The topologies, in the order [Each] runs them.
const (
	Standalone Topology = iota
	Cluster
	Sentinel
)

// All returns every topology.
func All() []Topology { return []Topology{Standalone, Cluster, Sentinel} }

func (tp Topology) String() string {
	switch tp {
	case Standalone:
		return "standalone"
	case Cluster:
		return "cluster"
	case Sentinel:
		return "sentinel"
	}
	return "unknown"
}

// Setup is where a topology's servers are: the addresses (the sentinels'
// for Sentinel, seed nodes for Cluster) and, for Sentinel, the master's
// name. Clients take it as is (redisstore.ClientOptions has the same
// fields).
type Setup struct {
	Addrs      []string
	MasterName string
	Cluster    bool
}

// Find returns tp's setup, or skips t (fails it under
// IDEMGATE_REQUIRE_REDIS=1) when the variables naming it are unset.
func (tp Topology) Find(t testing.TB) Setup {
	t.Helper()
	switch tp {
	case Standalone:
		return Setup{Addrs: []string{lookup(t, addrEnv)}}
	case Cluster:
		return Setup{Addrs: strings.Split(lookup(t, clusterAddrsEnv), ","), Cluster: true}
	case Sentinel:
		addrs := strings.Split(lookup(t, sentinelAddrsEnv), ",")
		return Setup{Addrs: addrs, MasterName: lookup(t, sentinelMasterEnv)}
	}
	t.Fatalf("redistest: unknown topology %d", tp)
	return Setup{}
}

// Addr returns the standalone server's address, or skips t (see [Topology.Find]).
func Addr(t testing.TB) string {
	t.Helper()
	return Standalone.Find(t).Addrs[0]
}

// Each runs fn as a parallel subtest per topology, named after it; a
// subtest whose topology is not running skips (see [Topology.Find]).
func Each(t *testing.T, fn func(t *testing.T, tp Topology)) {
	for _, tp := range All() {
		t.Run(tp.String(), func(t *testing.T) {
			t.Parallel()
			fn(t, tp)
		})
	}
}

// Prefix returns a Redis key prefix no other test or run uses, starting
// with "idemgate-test:".
func Prefix(t testing.TB) string {
	var b [6]byte
	rand.Read(b[:])
	return "idemgate-test:" + hex.EncodeToString(b[:]) + ":"
}

// lookup returns the variable's value, or skips (fails) t without it.
func lookup(t testing.TB, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v != "" {
		return v
	}
	msg := env + " is not set: start Redis with `scripts/redis-test.sh start DIR` and export `scripts/redis-test.sh env DIR`"
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("%s=1 but %s", requireEnv, msg)
	}
	t.Skip(msg)
	return ""
}
