package redisstore

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/replaycache"
	"github.com/idemgate/idemgate/keystore/storetest"
)

// newCached wraps s in a replay cache subscribed to s's invalidations,
// whose clock moves with s's test clock, and waits until it is subscribed.
func newCached(t testing.TB, s *Store) *replaycache.Store {
	t.Helper()
	c := replaycache.New(s, replaycache.Options{
		Invalidator: s,
		Now:         func() time.Time { return time.Now().Add(time.Duration(s.offset.Load()) * time.Millisecond) },
	})
	t.Cleanup(func() { c.Close() })
	testutil.Eventually(t, 5*time.Second, "the cache's subscription", func() bool { return c.Stats().Purges > 0 })
	return c
}

// The conformance suite holds with the replay cache in front of Redis.
func TestConformanceReplayCache(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		c := newClient(t, topo)
		prefix := redistest.Prefix(t)
		storetest.Run(t, func(t *testing.T) (keystore.Store, func(time.Duration)) {
			s := newStore(t, c, prefix)
			return newCached(t, s), s.advance
		})
	})
}

// Two proxies (two clients, one Redis), each with its replay cache. Both
// cache a completed answer; the store loses the record; the key is claimed
// anew and an operator repairs it through the first proxy: the second
// proxy's cache drops its answer (Pub/Sub) and replays the repaired one.
func TestReplayCacheInvalidationAcrossInstances(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		prefix := redistest.Prefix(t)
		sa, sb := newStore(t, newClient(t, topo), prefix), newStore(t, newClient(t, topo), prefix)
		a, b := newCached(t, sa), newCached(t, sb)
		ctx := t.Context()
		k := storetest.NewTestKey(t)
		res, err := a.Reserve(ctx, k, reserveOpts("a"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.CompleteClaim(ctx, k, res.Claim, &keystore.Response{Status: 201, Body: []byte("first")}); err != nil {
			t.Fatal(err)
		}
		for _, c := range []*replaycache.Store{a, b, a, b} {
			if got := replayBody(t, c, k); got != "first" {
				t.Fatalf("replay = %q; want %q", got, "first")
			}
		}
		if a.Stats().Hits != 1 || b.Stats().Hits != 1 {
			t.Fatalf("hits %d, %d; want 1, 1 (the second replay on each)", a.Stats().Hits, b.Stats().Hits)
		}

		// Store loss: the record vanishes; the key is claimed again (by a
		// request that reached Redis) and stays in flight.
		if err := sa.client.Del(ctx, sa.key(k)).Err(); err != nil {
			t.Fatal(err)
		}
		if res, err := sa.Reserve(ctx, k, reserveOpts("a")); err != nil || res.Token == 0 {
			t.Fatalf("Reserve after the loss = %+v, %v; want a claim", res, err)
		}
		// Until the repair, both caches still serve the answer that existed.
		if got := replayBody(t, b, k); got != "first" {
			t.Fatalf("replay from b's cache = %q; want %q", got, "first")
		}
		if err := a.ForceComplete(ctx, k, &keystore.Response{Status: 200, Body: []byte("repaired")}); err != nil {
			t.Fatalf("ForceComplete = %v", err)
		}
		if got := a.Stats().Entries; got != 0 {
			t.Errorf("a's entries right after its repair = %d; want 0", got)
		}
		testutil.Eventually(t, 5*time.Second, "b to drop the repaired key", func() bool { return b.Stats().Entries == 0 })
		for _, c := range []*replaycache.Store{a, b} {
			if got := replayBody(t, c, k); got != "repaired" {
				t.Errorf("replay after the repair = %q; want %q", got, "repaired")
			}
		}

		// ForceRelease is published too.
		k2 := storetest.NewTestKey(t)
		if _, err := sb.Reserve(ctx, k2, reserveOpts("a")); err != nil {
			t.Fatal(err)
		}
		replayBody(t, b, k) // b holds k again
		if err := b.Invalidate(ctx, k); err != nil {
			t.Fatal(err)
		}
		replayBody(t, a, k) // a holds k
		if err := b.ForceRelease(ctx, k2); err != nil {
			t.Fatalf("ForceRelease = %v", err)
		}
		if err := b.Invalidate(ctx, k); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 5*time.Second, "a to drop the invalidated key", func() bool { return a.Stats().Entries == 0 })
	})
}

func replayBody(t *testing.T, c keystore.Store, k keystore.Key) string {
	t.Helper()
	res, err := c.Reserve(t.Context(), k, reserveOpts("a"))
	if err != nil || res.Response == nil {
		t.Fatalf("Reserve = %+v, %v; want a replay", res, err)
	}
	return string(res.Response.Body)
}

// When Redis drops the subscriber's connection, messages published before
// go-redis resubscribes are lost: the cache empties itself on resubscribe.
// It kills every Pub/Sub connection of a redis-server of its own: on the
// shared one it would kill other packages' subscriptions too.
func TestReplayCachePurgedOnResubscribe(t *testing.T) {
	t.Parallel()
	client := startOwnRedis(t).client(t, testTimeout)
	s := newStore(t, client, redistest.Prefix(t))
	c := newCached(t, s)
	ctx := t.Context()
	k := storetest.NewTestKey(t)
	res, err := c.Reserve(ctx, k, reserveOpts("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteClaim(ctx, k, res.Claim, &keystore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	replayBody(t, c, k)
	if c.Stats().Entries != 1 {
		t.Fatalf("entries = %d; want 1", c.Stats().Entries)
	}
	purges := c.Stats().Purges
	if n, err := client.PubSubNumSub(ctx, s.channel()).Result(); err != nil || n[s.channel()] != 1 {
		t.Fatalf("subscribers of %s = %v, %v; want 1", s.channel(), n, err)
	}
	if killed, err := client.ClientKillByFilter(ctx, "TYPE", "pubsub").Result(); err != nil || killed != 1 {
		t.Fatalf("CLIENT KILL TYPE pubsub = %d, %v; want the cache's one connection", killed, err)
	}
	testutil.Eventually(t, 5*time.Second, "the cache to resubscribe and purge", func() bool { return c.Stats().Purges > purges })
	if c.Stats().Entries != 0 {
		t.Errorf("entries after resubscribing = %d; want 0", c.Stats().Entries)
	}
}

// BenchmarkReplayCache is BenchmarkStore with the replay cache in front:
// its Replay is a cache hit.
func BenchmarkReplayCache(b *testing.B) {
	topo := redistest.Standalone
	c := newClient(b, topo)
	prefix := redistest.Prefix(b)
	storetest.Bench(b, func(b *testing.B) keystore.Store { return newCached(b, newStore(b, c, prefix)) })
}

// An ACL user without the invalidation channel: the subscription is
// refused at once (go-redis alone would retry it forever, in silence), and
// a replay cache over such a store caches nothing, since it would not hear
// another replica's repair.
func TestReplayCacheChannelRefused(t *testing.T) {
	t.Parallel()
	_, user := aclUser(t, redistest.StartOwn(t), "~*", "resetchannels", "+@all")
	s := newStore(t, user, redistest.Prefix(t))
	ctx := t.Context()
	resynced := false
	err := s.SubscribeInvalidations(ctx, func(keystore.Key) {}, func() { resynced = true })
	if !redis.HasErrorPrefix(err, "NOPERM") || resynced {
		t.Fatalf("SubscribeInvalidations = %v (resync called: %v); want NOPERM at once", err, resynced)
	}
	c := replaycache.New(s, replaycache.Options{Invalidator: s})
	t.Cleanup(func() { c.Close() })
	k := storetest.NewTestKey(t)
	res, err := c.Reserve(ctx, k, reserveOpts("a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteClaim(ctx, k, res.Claim, &keystore.Response{Status: 201, Body: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := replayBody(t, c, k); got != "first" {
			t.Fatalf("replay = %q", got)
		}
	}
	if st := c.Stats(); st.Entries != 0 || st.Hits != 0 {
		t.Errorf("cache over a refused channel: %+v; want nothing cached", st)
	}
}
