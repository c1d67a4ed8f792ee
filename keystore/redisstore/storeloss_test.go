package redisstore

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/storetest"
)

// ownRedis is a redis-server of the test's own (redistest.Own), with a
// store client.
type ownRedis struct{ *redistest.Own }

func startOwnRedis(t *testing.T) *ownRedis { return &ownRedis{redistest.StartOwn(t)} }

func (r *ownRedis) client(t *testing.T, timeout time.Duration) redis.UniversalClient {
	t.Helper()
	c, err := NewClient(ClientOptions{Addrs: []string{r.Addr}, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func claimOpts(fp string, id keystore.ClaimID) keystore.ReserveOptions {
	o := reserveOpts(fp)
	o.ClaimID = id
	return o
}

// Finding 5 of issue 13: FLUSHALL while a write runs. The answer is stored
// anyway (the record is created again) and the retry replays it; the epoch
// watcher counts the reset.
func TestFlushAllDuringClaim(t *testing.T) {
	t.Parallel()
	own := startOwnRedis(t)
	c := own.client(t, testTimeout)
	s := newStore(t, c, redistest.Prefix(t))
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	w := newEpochWatcher(s, EpochOptions{Now: func() time.Time { return now }})
	ctx := t.Context()
	if _, err := w.check(ctx); err != nil {
		t.Fatal(err)
	}

	k := storetest.NewTestKey(t)
	res, err := s.Reserve(ctx, k, claimOpts("a", keystore.NewClaimID()))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// What the first release did: the late completion finds nothing.
	if err := s.Complete(ctx, k, res.Token, &keystore.Response{Status: 201}); !errors.Is(err, keystore.ErrNotFound) {
		t.Fatalf("token Complete after FLUSHALL = %v; want ErrNotFound (the first release's behaviour)", err)
	}
	want := &keystore.Response{Status: 201, Body: []byte(`{"order":7}`)}
	how, err := s.CompleteClaim(ctx, k, res.Claim, want)
	if err != nil || how != keystore.Recreated {
		t.Fatalf("CompleteClaim after FLUSHALL = %v, %v; want recreated", how, err)
	}
	rec, err := s.Get(ctx, k)
	if err != nil || rec.State != keystore.StateCompleted || rec.Response == nil || string(rec.Response.Body) != `{"order":7}` {
		t.Fatalf("Get = %+v, %v; want the completed answer", rec, err)
	}
	if ttl, err := c.PTTL(ctx, s.key(k)).Result(); err != nil || ttl <= 0 || ttl > storetest.Retention {
		t.Errorf("PTTL = %v, %v; want at most the retention from the claim", ttl, err)
	}
	retry, err := s.Reserve(ctx, k, claimOpts("a", keystore.NewClaimID()))
	if err != nil || retry.Response == nil || string(retry.Response.Body) != `{"order":7}` {
		t.Fatalf("retry = %+v, %v; want a replay, not a second run", retry, err)
	}

	resets, err := w.check(ctx)
	if err != nil || len(resets) != 1 {
		t.Fatalf("epoch check after FLUSHALL = %v, %v; want one reset", resets, err)
	}
	if st := w.EpochStatus(); st.Resets != 1 || !st.LastReset.Equal(now) || st.Err != nil {
		t.Errorf("EpochStatus = %+v; want 1 reset at %v", st, now)
	}
	if resets, err := w.check(ctx); err != nil || len(resets) != 0 {
		t.Errorf("next check = %v, %v; want no reset (a new epoch was written)", resets, err)
	}
}

// Finding 6 of issue 13: Redis paused (SIGSTOP) while a claim is sent. The
// claim times out (the client gets 503) and is handed to the ReleaseRetrier;
// Redis resumes and may run the queued claim; within a second of it
// answering, the key is free and a retry's claim wins.
func TestLostClaimReplyReleased(t *testing.T) {
	t.Parallel()
	own := startOwnRedis(t)
	c := own.client(t, 300*time.Millisecond)
	s := newStore(t, c, redistest.Prefix(t))
	ctx := t.Context()
	const lease = 2 * time.Minute
	opts := func(id keystore.ClaimID) keystore.ReserveOptions {
		return keystore.ReserveOptions{Fingerprint: keystore.Fingerprint(keystore.NewKey("fp")), Route: "r", Lease: lease, Retention: time.Hour, ClaimID: id}
	}
	// Load the scripts, as a running proxy has: the queued EVALSHA then runs
	// when Redis resumes, rather than failing with NOSCRIPT.
	if _, err := s.Reserve(ctx, storetest.NewTestKey(t), opts(keystore.NewClaimID())); err != nil {
		t.Fatal(err)
	}
	r := keystore.NewReleaseRetrier(s, keystore.ReleaseRetrierOptions{})
	defer r.Close(ctx)

	released, control := storetest.NewTestKey(t), storetest.NewTestKey(t)
	own.Signal(syscall.SIGSTOP)
	var wg sync.WaitGroup
	for _, k := range []keystore.Key{released, control} {
		wg.Go(func() {
			id := keystore.NewClaimID()
			if _, err := s.Reserve(ctx, k, opts(id)); err == nil {
				t.Errorf("Reserve against a paused Redis succeeded")
			}
			if k == released {
				r.Add(k, id, lease)
			}
		})
	}
	wg.Wait()
	time.Sleep(time.Second) // the pause goes on; the release retrier keeps trying
	if st := r.Stats(); st.Pending != 1 || st.Released != 0 {
		t.Fatalf("ReleaseRetrier while Redis is paused: %+v; want 1 pending", st)
	}
	own.Signal(syscall.SIGCONT)
	resumed := time.Now()

	var won keystore.Reservation
	for {
		res, err := s.Reserve(ctx, released, opts(keystore.NewClaimID()))
		if err == nil && res.Token > 0 {
			won = res
			break
		}
		if err != nil && !errors.Is(err, keystore.ErrInFlight) && time.Since(resumed) > 500*time.Millisecond {
			t.Fatalf("Reserve after SIGCONT = %v", err)
		}
		if time.Since(resumed) > 3*time.Second {
			t.Fatalf("the key was not free %v after Redis resumed (last Reserve: %v); want within a second", time.Since(resumed), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(resumed)
	t.Logf("a new claim won %v after Redis resumed", took)
	if took > 1500*time.Millisecond { // a second, and a margin for a loaded machine
		t.Errorf("a new claim won %v after Redis resumed; want within a second", took)
	}
	// A timed-out attempt may have done the release when Redis resumed; the
	// ReleaseRetrier then learns it on its next attempt.
	testutil.Eventually(t, time.Second, "the ReleaseRetrier to finish", func() error {
		if st := r.Stats(); st.Pending != 0 || st.Released != 1 {
			return fmt.Errorf("release retrier %+v; want 1 released", st)
		}
		return nil
	})
	if how, err := s.CompleteClaim(ctx, released, won.Claim, &keystore.Response{Status: 201}); err != nil || how != keystore.Completed {
		t.Errorf("the winner's CompleteClaim = %v, %v", how, err)
	}
	// The control key shows what happens without the release: if Redis ran
	// the queued claim, the key is held for the whole lease.
	_, err := s.Reserve(ctx, control, opts(keystore.NewClaimID()))
	t.Logf("control key (claim lost, not released) after resume: %v", err)
}

// Finding 5 of issue 13: a Redis without persistence restarts (SIGKILL, then
// start): the watcher, checking every second, sees the reset, counts it
// and writes a new epoch; an answer in hand is still stored.
func TestRestartWithoutPersistenceDetected(t *testing.T) {
	t.Parallel()
	own := startOwnRedis(t)
	c := own.client(t, testTimeout)
	s := newStore(t, c, redistest.Prefix(t))
	ctx := t.Context()
	resets := make(chan Reset, 4)
	w := s.WatchEpoch(EpochOptions{OnReset: func(r Reset) { resets <- r }})
	defer w.Close()
	testutil.Eventually(t, 5*time.Second, "a first epoch check", func() error {
		if st := w.EpochStatus(); st.Checked.IsZero() {
			return errors.New("not checked yet")
		}
		return nil
	})
	k := storetest.NewTestKey(t)
	res, err := s.Reserve(ctx, k, claimOpts("a", keystore.NewClaimID()))
	if err != nil {
		t.Fatal(err)
	}

	own.Kill()
	own.Start()
	restarted := time.Now()
	select {
	case r := <-resets:
		t.Logf("reset seen %v after the restart: %+v", time.Since(restarted), r)
		if r.Previous == "" || r.Current == "" || r.Previous == r.Current || r.Marker != s.prefix+"epoch" {
			t.Errorf("Reset = %+v; want the marker's old and new epochs", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no reset seen 5s after a restart without persistence; status %+v", w.EpochStatus())
	}
	if st := w.EpochStatus(); st.Resets != 1 || st.LastReset.IsZero() {
		t.Errorf("EpochStatus = %+v; want 1 reset", st)
	}
	if got, err := c.Get(ctx, s.prefix+"epoch").Result(); err != nil || got == "" {
		t.Errorf("marker after the reset = %q, %v; want a new epoch", got, err)
	}
	// The answer in hand is stored although its record was lost.
	if how, err := s.CompleteClaim(ctx, k, res.Claim, &keystore.Response{Status: 201}); err != nil || how != keystore.Recreated {
		t.Errorf("CompleteClaim after the restart = %v, %v; want recreated", how, err)
	}
	time.Sleep(1500 * time.Millisecond)
	if st := w.EpochStatus(); st.Resets != 1 {
		t.Errorf("EpochStatus later = %+v; want still 1 reset", st)
	}
}

// One marker per master of a Cluster, each on its master; deleting one is
// one reset. Another replica's watcher shares the markers without counting.
func TestEpochMarkers(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		c := newClient(t, topo)
		s := newStore(t, c, redistest.Prefix(t))
		ctx := t.Context()
		w := newEpochWatcher(s, EpochOptions{})
		if resets, err := w.check(ctx); err != nil || len(resets) != 0 {
			t.Fatalf("first check = %v, %v; want no reset", resets, err)
		}
		markers, err := w.markers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if cc, ok := c.(*redis.ClusterClient); ok {
			want = 3
			nodes := map[string]bool{}
			for _, m := range markers {
				n, err := cc.MasterForKey(ctx, m.key)
				if err != nil {
					t.Fatal(err)
				}
				nodes[n.Options().Addr] = true
			}
			if len(nodes) != 3 {
				t.Errorf("markers %v live on %d masters; want 3", markers, len(nodes))
			}
		}
		if len(markers) != want {
			t.Fatalf("%d markers; want %d", len(markers), want)
		}
		for _, m := range markers {
			if n, err := c.Exists(ctx, m.key).Result(); err != nil || n != 1 {
				t.Errorf("marker %s: EXISTS = %d, %v; want written", m.key, n, err)
			}
		}
		other := newEpochWatcher(s, EpochOptions{}) // another replica
		if resets, err := other.check(ctx); err != nil || len(resets) != 0 {
			t.Fatalf("another replica's first check = %v, %v; want no reset", resets, err)
		}
		if err := c.Del(ctx, markers[len(markers)-1].key).Err(); err != nil {
			t.Fatal(err)
		}
		if resets, err := w.check(ctx); err != nil || len(resets) != 1 || resets[0].Marker != markers[len(markers)-1].key {
			t.Errorf("check after one marker vanished = %+v, %v; want one reset of it", resets, err)
		}
		// The other replica finds the epoch the first wrote: a reset too.
		if resets, err := other.check(ctx); err != nil || len(resets) != 1 {
			t.Errorf("the other replica's check = %+v, %v; want one reset", resets, err)
		}
		for _, x := range []*EpochWatcher{w, other} {
			if resets, err := x.check(ctx); err != nil || len(resets) != 0 {
				t.Errorf("a further check = %+v, %v; want none", resets, err)
			}
			if st := x.EpochStatus(); st.Resets != 1 {
				t.Errorf("EpochStatus = %+v; want 1 reset", st)
			}
		}
	})
}

// hashSlot agrees with Redis's CLUSTER KEYSLOT.
func TestHashSlot(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Cluster)
	for _, key := range []string{"0", "1", "42", "epoch", "idemgate:epoch", "a-much-longer-key-with-text", "123456789"} {
		want, err := c.ClusterKeySlot(t.Context(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := hashSlot(key); int64(got) != want {
			t.Errorf("hashSlot(%q) = %d; want %d", key, got, want)
		}
	}
	if got := hashSlot("123456789"); got != 0x31C3%16384 { // the CRC16/XMODEM check value
		t.Errorf("hashSlot(123456789) = %d; want %d", got, 0x31C3%16384)
	}
}

// Records written by the first release (no claim id, no fingerprint
// version) still read, replay and are fenced correctly: a retry that spans
// the upgrade replays.
func TestFirstReleaseRecords(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	s := newStore(t, c, redistest.Prefix(t))
	ctx := t.Context()
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	ms := now.UnixMilli()
	fp := keystore.Fingerprint(keystore.NewKey("fp", "a"))
	answer := keystore.EncodeResponse(&keystore.Response{Status: 201, Body: []byte("first release")})
	// The fields the first release's reserve and complete scripts wrote.
	write := func(k keystore.Key, st string, le int64, tk string) {
		t.Helper()
		fields := []any{"v", "1", "st", st, "fp", string(fp[:]), "rt", "route_a", "tk", tk, "cl", strconv.FormatInt(ms, 10),
			"le", strconv.FormatInt(le, 10), "ex", strconv.FormatInt(ms+60_000, 10), "op", "12345678", "tko", "0"}
		if st == "2" {
			fields = append(fields, "ans", answer)
		}
		if err := c.HSet(ctx, s.key(k), fields...).Err(); err != nil {
			t.Fatal(err)
		}
		if err := c.PExpire(ctx, s.key(k), time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	v2 := func(id keystore.ClaimID) keystore.ReserveOptions {
		o := claimOpts("a", id)
		o.FingerprintVersion = 2
		return o
	}

	done := storetest.NewTestKey(t)
	write(done, "2", 0, "1796100000000000")
	rec, err := s.Get(ctx, done)
	if err != nil || rec.FingerprintVersion != keystore.FingerprintV1 || !rec.ClaimID.IsZero() || rec.Response == nil || string(rec.Response.Body) != "first release" {
		t.Fatalf("Get of a first-release record = %+v, %v; want version 1, no claim id, its answer", rec, err)
	}
	res, err := s.Reserve(ctx, done, claimOpts("a", keystore.NewClaimID()))
	if err != nil || res.Response == nil || res.FingerprintVersion != keystore.FingerprintV1 {
		t.Fatalf("Reserve in version 1 = %+v, %v; want a replay of a version 1 record", res, err)
	}
	var me *keystore.MismatchError
	if _, err := s.Reserve(ctx, done, v2(keystore.NewClaimID())); !errors.As(err, &me) || me.Version != keystore.FingerprintV1 {
		t.Errorf("Reserve in version 2 = %v; want a MismatchError naming version 1 (compare in it)", err)
	}

	held := storetest.NewTestKey(t)
	write(held, "1", ms+60_000, "1796100000000000")
	stranger := keystore.Claim{ID: keystore.NewClaimID(), Token: 1796100000000000, Fingerprint: fp, FingerprintVersion: 1, Route: "route_a", Claimed: now, Expires: now.Add(time.Minute)}
	if how, err := s.CompleteClaim(ctx, held, stranger, &keystore.Response{Status: 200}); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Errorf("CompleteClaim on a first-release claim = %v, %v; want ErrLeaseLost (not ours)", how, err)
	}
	if err := s.Complete(ctx, held, 1796100000000000, &keystore.Response{Status: 200}); err != nil {
		t.Errorf("the first-release holder's Complete = %v", err)
	}

	// A new claim taking over a first-release claim completes by its id.
	stuck := storetest.NewTestKey(t)
	write(stuck, "1", ms-1, "1796100000000000")
	id := keystore.NewClaimID()
	res, err = s.Reserve(ctx, stuck, claimOpts("a", id))
	if err != nil || !res.Takeover || res.Claim.ID != id {
		t.Fatalf("takeover = %+v, %v", res, err)
	}
	if how, err := s.CompleteClaim(ctx, stuck, res.Claim, &keystore.Response{Status: 200}); err != nil || how != keystore.Completed {
		t.Errorf("CompleteClaim after the takeover = %v, %v; want completed", how, err)
	}
}

// A check that cannot reach Redis reports its error and counts nothing.
func TestEpochCheckUnreachable(t *testing.T) {
	t.Parallel()
	c, err := NewClient(ClientOptions{Addrs: []string{"127.0.0.1:1"}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := newStore(t, c, redistest.Prefix(t))
	w := newEpochWatcher(s, EpochOptions{})
	if _, err := w.check(t.Context()); err == nil {
		t.Fatal("check against a dead address = nil; want an error")
	}
	if st := w.EpochStatus(); st.Err == nil || !st.Checked.IsZero() || st.Resets != 0 {
		t.Errorf("EpochStatus = %+v; want the error, never checked, no reset", st)
	}
}
