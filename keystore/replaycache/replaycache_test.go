package replaycache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
	"github.com/idemgate/idemgate/keystore/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// counting counts the Reserves that reach the store, and can make each take
// a while by the shared clock (a slow round trip).
type counting struct {
	*memstore.Store
	reserves atomic.Int64
	clk      *testutil.Clock
	rtt      time.Duration
}

func (c *counting) Reserve(ctx context.Context, k keystore.Key, o keystore.ReserveOptions) (keystore.Reservation, error) {
	c.reserves.Add(1)
	c.clk.Advance(c.rtt / 2)
	res, err := c.Store.Reserve(ctx, k, o)
	c.clk.Advance(c.rtt / 2)
	return res, err
}

func newCache(t *testing.T, opts Options, rtt time.Duration) (*Store, *counting, *testutil.Clock) {
	clk := testutil.NewClock(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	inner := &counting{Store: memstore.New(memstore.Options{Now: clk.Now}), clk: clk, rtt: rtt}
	opts.Now = clk.Now
	c := New(inner, opts)
	t.Cleanup(func() { c.Close() })
	return c, inner, clk
}

func TestConformanceOverMemstore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) (keystore.Store, func(time.Duration)) {
		c, _, clk := newCache(t, Options{}, 0)
		return c, clk.Advance
	})
}

func reserveOpts(fp string) keystore.ReserveOptions {
	return keystore.ReserveOptions{Fingerprint: keystore.Fingerprint(keystore.NewKey(fp)), Route: "r", Lease: time.Second, Retention: time.Minute}
}

func complete(t *testing.T, s keystore.Store, k keystore.Key, body string) {
	t.Helper()
	res, err := s.Reserve(t.Context(), k, reserveOpts("a"))
	if err != nil || res.Token == 0 {
		t.Fatalf("Reserve = %+v, %v; want a claim", res, err)
	}
	if _, err := s.CompleteClaim(t.Context(), k, res.Claim, &keystore.Response{Status: 201, Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
}

func replay(t *testing.T, s keystore.Store, k keystore.Key) string {
	t.Helper()
	res, err := s.Reserve(t.Context(), k, reserveOpts("a"))
	if err != nil || res.Response == nil {
		t.Fatalf("Reserve = %+v, %v; want a replay", res, err)
	}
	return string(res.Response.Body)
}

// The first replay goes to the store; the next are answered here, with the
// same answer; other fingerprints still reach the store.
func TestHitsSkipTheStore(t *testing.T) {
	t.Parallel()
	c, inner, _ := newCache(t, Options{}, 0)
	k := keystore.NewKey("k")
	complete(t, c, k, "one")
	before := inner.reserves.Load()
	for range 100 {
		if got := replay(t, c, k); got != "one" {
			t.Fatalf("replay = %q; want %q", got, "one")
		}
	}
	if got := inner.reserves.Load() - before; got != 1 {
		t.Errorf("Reserves that reached the store for 100 replays = %d; want 1", got)
	}
	if st := c.Stats(); st.Hits != 99 || st.Entries != 1 {
		t.Errorf("Stats = %+v; want 99 hits, 1 entry", st)
	}
	if _, err := c.Reserve(t.Context(), k, reserveOpts("other")); !errors.Is(err, keystore.ErrFingerprintMismatch) {
		t.Errorf("Reserve with another fingerprint = %v; want ErrFingerprintMismatch from the store", err)
	}
}

// An entry never outlives its record, even when the round trip that fetched
// it took long: its life counts from before the Reserve was sent.
func TestEntryExpiresWithTheRecord(t *testing.T) {
	t.Parallel()
	c, inner, clk := newCache(t, Options{}, 10*time.Second)
	k := keystore.NewKey("k")
	complete(t, c, k, "one") // the claim took 10 s: the record has 50 s left
	replay(t, c, k)          // 10 s more: 40 s left, 35 s when the store read it
	n := inner.reserves.Load()
	clk.Advance(29 * time.Second) // 11 s left
	replay(t, c, k)
	if inner.reserves.Load() != n {
		t.Fatalf("replay with 11 s of the record left reached the store; want a hit")
	}
	clk.Advance(11 * time.Second) // the record expires now
	res, err := c.Reserve(t.Context(), k, reserveOpts("a"))
	if err != nil || res.Token == 0 || res.Response != nil {
		t.Errorf("Reserve when the record expired = %+v, %v; want a new claim from the store", res, err)
	}
}

func TestBounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts Options
		body int
		want int64
	}{
		{"entries", Options{MaxEntries: 3}, 10, 3},
		{"bytes", Options{MaxBytes: 5 * (EntryOverhead + 100)}, 100, 5},
		{"too big for the cache", Options{MaxBytes: 1000}, 2000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, _, _ := newCache(t, tc.opts, 0)
			// One shard, so that eviction has something to take.
			var keys []keystore.Key
			for i := 0; len(keys) < 50; i++ {
				if k := keystore.NewKey(fmt.Sprint(i)); k[1]%numShards == 0 {
					keys = append(keys, k)
				}
			}
			body := string(bytes.Repeat([]byte("x"), tc.body))
			for _, k := range keys {
				complete(t, c, k, body)
				replay(t, c, k)
			}
			st := c.Stats()
			if st.Entries != tc.want {
				t.Errorf("entries = %d; want %d", st.Entries, tc.want)
			}
			if st.Bytes > c.maxBytes || st.Entries > c.maxItems {
				t.Errorf("Stats %+v over the bounds", st)
			}
			// The newest answers are the ones kept.
			if tc.want > 0 {
				before := c.Stats().Hits
				replay(t, c, keys[len(keys)-1])
				if c.Stats().Hits != before+1 {
					t.Errorf("the newest answer is not cached")
				}
			}
		})
	}
}

// loopback is an Invalidator shared by the caches of one test: what one
// publishes, every subscriber drops.
type loopback struct {
	mu   sync.Mutex
	subs []func(keystore.Key)
}

func (l *loopback) PublishInvalidation(_ context.Context, k keystore.Key) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, f := range l.subs {
		f(k)
	}
	return nil
}

func (l *loopback) SubscribeInvalidations(ctx context.Context, drop func(keystore.Key), resync func()) error {
	l.mu.Lock()
	l.subs = append(l.subs, drop)
	l.mu.Unlock()
	resync()
	<-ctx.Done()
	return nil
}

// A repair invalidates the key in every cache; an answer read before an
// invalidation is not cached after it.
func TestRepairInvalidates(t *testing.T) {
	t.Parallel()
	lb := &loopback{}
	clk := testutil.NewClock(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC))
	inner := memstore.New(memstore.Options{Now: clk.Now})
	a := New(inner, Options{Invalidator: lb, Now: clk.Now})
	b := New(nopClose{inner}, Options{Invalidator: lb, Now: clk.Now})
	t.Cleanup(func() { b.Close(); a.Close() })
	for a.Stats().Purges == 0 || b.Stats().Purges == 0 {
		time.Sleep(time.Millisecond) // both subscribed
	}
	k := keystore.NewKey("k")
	complete(t, a, k, "one")
	replay(t, a, k)
	replay(t, b, k)
	if a.Stats().Entries != 1 || b.Stats().Entries != 1 {
		t.Fatalf("entries %d, %d; want 1, 1", a.Stats().Entries, b.Stats().Entries)
	}
	// ForceRelease of a completed record changes nothing in the store (it
	// is refused), but the repair is still dropped locally.
	if err := a.ForceRelease(t.Context(), k); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("ForceRelease(completed) = %v; want ErrLeaseLost", err)
	}
	if a.Stats().Entries != 0 || b.Stats().Entries != 1 {
		t.Errorf("after a refused repair: entries %d, %d; want 0 (local drop), 1", a.Stats().Entries, b.Stats().Entries)
	}
	// A repair that the store makes is published.
	k2 := keystore.NewKey("k2")
	if _, err := inner.Reserve(t.Context(), k2, reserveOpts("a")); err != nil {
		t.Fatal(err)
	}
	replay(t, b, k) // b holds k
	if err := a.ForceComplete(t.Context(), k2, &keystore.Response{Status: 200}); err != nil {
		t.Fatal(err)
	}
	if err := a.Invalidate(t.Context(), k); err != nil {
		t.Fatal(err)
	}
	if b.Stats().Entries != 0 {
		t.Errorf("b's entries after a's Invalidate = %d; want 0", b.Stats().Entries)
	}
	// The generation check: an answer read, then invalidated, is not cached.
	gen := b.gen.Load()
	b.drop(k)
	b.add(k, gen, &item{key: k, expires: clk.Now().Add(time.Hour), size: 1})
	if b.Stats().Entries != 0 {
		t.Errorf("an answer read before an invalidation was cached after it")
	}
}

type nopClose struct{ *memstore.Store }

func (nopClose) Close() error { return nil }

// Many goroutines replaying and invalidating: the counts add up.
func TestConcurrentHitsAndDrops(t *testing.T) {
	t.Parallel()
	c, _, _ := newCache(t, Options{MaxEntries: 64}, 0)
	var keys []keystore.Key
	for i := range 200 {
		k := keystore.NewKey(fmt.Sprint(i))
		keys = append(keys, k)
		complete(t, c, k, fmt.Sprint(i))
	}
	var wg sync.WaitGroup
	var bad atomic.Int64
	for g := range 16 {
		wg.Go(func() {
			for i := range 2000 {
				k := keys[(g*31+i)%len(keys)]
				if i%50 == 0 {
					c.drop(k)
					continue
				}
				res, err := c.Reserve(context.Background(), k, reserveOpts("a"))
				if err != nil || res.Response == nil || string(res.Response.Body) != fmt.Sprint((g*31+i)%len(keys)) {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Errorf("%d wrong replays", bad.Load())
	}
	st := c.Stats()
	if st.Entries > 64 || st.Entries < 0 || st.Hits+st.Misses != 200+16*2000-16*40 {
		t.Errorf("Stats = %+v; want at most 64 entries and %d lookups (200 claims and the replays)", st, 200+16*2000-16*40)
	}
}

// gated is an Invalidator whose subscription the test makes (ok) or fails
// (fail): until then SubscribeInvalidations waits.
type gated struct {
	ok, fail chan struct{}
}

func (g *gated) PublishInvalidation(context.Context, keystore.Key) error { return nil }

func (g *gated) SubscribeInvalidations(ctx context.Context, drop func(keystore.Key), resync func()) error {
	select {
	case <-ctx.Done():
		return nil
	case <-g.fail:
		return errors.New("NOPERM this user has no permissions to access the channel")
	case <-g.ok:
	}
	resync()
	select {
	case <-ctx.Done():
		return nil
	case <-g.fail:
		return errors.New("subscription lost")
	}
}

// A cache that cannot hear invalidations caches nothing: before its first
// subscription, and after a failed one (until the next), so that another
// replica's repair never leaves it serving a stale answer.
func TestCachesOnlyWhileSubscribed(t *testing.T) {
	t.Parallel()
	g := &gated{ok: make(chan struct{}), fail: make(chan struct{})}
	c, inner, _ := newCache(t, Options{Invalidator: g}, 0)
	k := keystore.NewKey("k")
	complete(t, c, k, "one")
	replay(t, c, k)
	replay(t, c, k)
	if got := c.Stats().Entries; got != 0 {
		t.Fatalf("entries before the subscription = %d; want 0", got)
	}
	before := inner.reserves.Load()
	g.ok <- struct{}{}
	testutil.Eventually(t, 5*time.Second, "the subscription", func() bool { return c.Stats().Purges > 0 })
	replay(t, c, k)
	replay(t, c, k)
	if got, n := c.Stats().Entries, inner.reserves.Load()-before; got != 1 || n != 1 {
		t.Fatalf("subscribed: entries %d, store reserves %d; want 1, 1 (the second replay from the cache)", got, n)
	}
	purges := c.Stats().Purges
	g.fail <- struct{}{} // the subscription fails; the next attempt waits
	testutil.Eventually(t, 5*time.Second, "the purge after the failure", func() bool { return c.Stats().Purges > purges })
	before = inner.reserves.Load()
	replay(t, c, k)
	replay(t, c, k)
	if got, n := c.Stats().Entries, inner.reserves.Load()-before; got != 0 || n != 2 {
		t.Errorf("after a failed subscription: entries %d, store reserves %d; want 0, 2", got, n)
	}
}
