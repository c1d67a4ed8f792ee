package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/sealed"
	"github.com/idemgate/idemgate/keystore/storetest"
)

// The sealed wrapper passes the suite on Redis too.
func TestConformanceSealed(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	prefix := redistest.Prefix(t)
	key, err := sealed.ParseKey("q83vEjRWeJCrze8SNFZ4kKvN7xI0VniQq83vEjRWeJA=")
	if err != nil {
		t.Fatal(err)
	}
	storetest.Run(t, func(t *testing.T) (keystore.Store, func(time.Duration)) {
		s := newStore(t, c, prefix)
		ss, err := sealed.New(s, key)
		if err != nil {
			t.Fatal(err)
		}
		return ss, s.advance
	})
}

// A Sentinel failover (SENTINEL FAILOVER promotes the replica) interrupts
// writes briefly; they resume against the new master without a restart,
// and a record written (and replicated) before it still replays.
//
// Not parallel: it moves the master under every other Sentinel test, so it
// runs before the parallel tests start.
func TestSentinelFailover(t *testing.T) {
	topo := redistest.Sentinel
	o := clientOptions(t, topo)
	c := newClient(t, topo)
	s := newStore(t, c, redistest.Prefix(t))
	ctx := t.Context()

	sentinel := redis.NewSentinelClient(&redis.Options{Addr: o.Addrs[0], DialTimeout: time.Second, ReadTimeout: time.Second})
	defer sentinel.Close()
	before, err := sentinel.GetMasterAddrByName(ctx, o.MasterName).Result()
	if err != nil {
		t.Fatalf("SENTINEL get-master-addr-by-name = %v", err)
	}

	// After an earlier failover (a previous run) the old master rejoins as a
	// replica only after up to 10 s: wait for a replica in sync.
	testutil.Eventually(t, 20*time.Second, "a replica in sync", func() error {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && !strings.Contains(info, "state=online") {
			err = errors.New("no replica online")
		}
		return err
	})

	k := storetest.NewTestKey(t)
	res, err := s.Reserve(ctx, k, reserveOpts("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, k, res.Token, &keystore.Response{Status: 201, Body: []byte("before")}); err != nil {
		t.Fatal(err)
	}
	// Wait until the replica has the record, so that the failover cannot
	// lose it (replication is asynchronous).
	if n, err := c.Do(ctx, "WAIT", 1, 2000).Int64(); err != nil || n < 1 {
		t.Fatalf("WAIT 1 = %d, %v; want the replica in sync", n, err)
	}

	// The sentinels may not yet deem a replica that rejoined after an earlier
	// failover promotable (NOGOODSLAVE): retry until one is.
	testutil.Eventually(t, 20*time.Second, "SENTINEL FAILOVER accepted", func() error {
		return sentinel.Failover(ctx, o.MasterName).Err()
	})
	start := time.Now()
	deadline := start.Add(20 * time.Second)
	var fails int
	var lastErr error
	tick := time.NewTicker(20 * time.Millisecond) // polling interval while the failover runs
	defer tick.Stop()
	for switched, ok := false, false; !ok; <-tick.C {
		if time.Now().After(deadline) {
			t.Fatalf("writes did not resume on a new master within 20s (switched %v, %d failed writes, last %v)", switched, fails, lastErr)
		}
		if !switched {
			after, err := sentinel.GetMasterAddrByName(ctx, o.MasterName).Result()
			switched = err == nil && strings.Join(after, ":") != strings.Join(before, ":")
		}
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		k := storetest.NewTestKey(t)
		r, err := s.Reserve(wctx, k, reserveOpts("a"))
		if err == nil {
			err = s.Complete(wctx, k, r.Token, &keystore.Response{Status: 200})
		}
		cancel()
		if err != nil {
			fails++
			lastErr = err
		}
		ok = switched && err == nil
	}
	t.Logf("failover from %v: writes resumed after %v, %d failed writes (last: %v)", before, time.Since(start).Round(time.Millisecond), fails, lastErr)
	got, err := s.Reserve(ctx, k, reserveOpts("a"))
	if err != nil || got.Response == nil || string(got.Response.Body) != "before" {
		t.Errorf("replay of the record written before the failover = %+v, %v; want it", got, err)
	}
	// Leave a settled topology for the tests that run next: every sentinel
	// names the new master, and the old master has become a replica (until
	// then a client that asked a lagging sentinel writes to the old master).
	after, err := sentinel.GetMasterAddrByName(ctx, o.MasterName).Result()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "every sentinel names the new master, the old one is a replica", func() error {
		for _, addr := range o.Addrs {
			sc := redis.NewSentinelClient(&redis.Options{Addr: addr, DialTimeout: time.Second, ReadTimeout: time.Second})
			got, err := sc.GetMasterAddrByName(ctx, o.MasterName).Result()
			sc.Close()
			if err != nil {
				return err
			}
			if strings.Join(got, ":") != strings.Join(after, ":") {
				return fmt.Errorf("sentinel %s names %v", addr, got)
			}
		}
		old := redis.NewClient(&redis.Options{Addr: strings.Join(before, ":"), DialTimeout: time.Second, ReadTimeout: time.Second, Password: o.Password})
		defer old.Close()
		role, err := old.Do(ctx, "ROLE").Slice()
		if err != nil {
			return err
		}
		if len(role) == 0 || role[0] != "slave" {
			return fmt.Errorf("old master's role is %v", role)
		}
		return nil
	})
}
