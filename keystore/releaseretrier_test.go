package keystore_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// hung is a real memory store whose ReleaseClaim hangs until the caller's
// deadline while down is set, as a paused Redis does.
type hung struct {
	keystore.Store
	down   atomic.Bool
	calls  atomic.Int64
	poison keystore.Key // ReleaseClaim on it always fails, as on a foreign value

	mu       sync.Mutex
	released []time.Time // when each ReleaseClaim succeeded
}

func (h *hung) ReleaseClaim(ctx context.Context, k keystore.Key, id keystore.ClaimID, lease time.Duration) error {
	h.calls.Add(1)
	if k == h.poison {
		return errors.New("foreign value at the key")
	}
	if h.down.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	err := h.Store.ReleaseClaim(ctx, k, id, lease)
	if err == nil {
		h.mu.Lock()
		h.released = append(h.released, time.Now())
		h.mu.Unlock()
	}
	return err
}

func (h *hung) lastRelease() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.released) == 0 {
		return time.Time{}
	}
	return h.released[len(h.released)-1]
}

const lease = 2 * time.Minute

func claimOpts(id keystore.ClaimID) keystore.ReserveOptions {
	return keystore.ReserveOptions{Fingerprint: keystore.Fingerprint(keystore.NewKey("fp")), Lease: lease, Retention: time.Hour, ClaimID: id}
}

func newHung(t *testing.T) *hung {
	s := memstore.New(memstore.Options{})
	t.Cleanup(func() { s.Close() })
	return &hung{Store: s}
}

// Finding 6 of issue 13: claims made while the store did not answer hold
// their keys until the store answers again; then every one is released
// within a second and the keys are free.
func TestReleaseRetrierFreesKeysWithinASecondOfTheStoreAnswering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		h := newHung(t)
		r := keystore.NewReleaseRetrier(h, keystore.ReleaseRetrierOptions{Now: time.Now})
		defer r.Close(ctx)

		const n = 100
		keys := make([]keystore.Key, n)
		h.down.Store(true)
		for i := range keys {
			keys[i] = keystore.NewKey("k", string(rune(i)))
			id := keystore.NewClaimID()
			// The claim reached the store, but its reply was lost.
			if _, err := h.Reserve(ctx, keys[i], claimOpts(id)); err != nil {
				t.Fatal(err)
			}
			if !r.Add(keys[i], id, lease) {
				t.Fatalf("Add #%d = false", i)
			}
		}
		time.Sleep(30 * time.Second) // the store stays down
		st := r.Stats()
		if st.Pending != n || st.Released != 0 || st.Oldest != 30*time.Second {
			t.Errorf("Stats while down = %+v; want %d pending for 30s, none released", st, n)
		}
		// A round against a dead store costs one attempt, not n.
		if calls := h.calls.Load(); calls > 30*4/3+2 {
			t.Errorf("%d ReleaseClaim calls in 30 s of outage; want about one per 750 ms", calls)
		}
		if _, err := h.Reserve(ctx, keys[0], claimOpts(keystore.NewClaimID())); !errors.Is(err, keystore.ErrInFlight) {
			t.Fatalf("Reserve during the outage = %v; want ErrInFlight (the lost claim holds)", err)
		}

		back := time.Now()
		h.down.Store(false)
		time.Sleep(time.Second)
		synctest.Wait()
		st = r.Stats()
		if st.Pending != 0 || st.Released != n || st.Dropped != 0 {
			t.Fatalf("Stats a second after the store answers = %+v; want all %d released", st, n)
		}
		if took := h.lastRelease().Sub(back); took > time.Second {
			t.Errorf("last release %v after the store answered; want within a second", took)
		}
		for i, k := range keys {
			if res, err := h.Reserve(ctx, k, claimOpts(keystore.NewClaimID())); err != nil || res.Token == 0 {
				t.Fatalf("key %d after the release: Reserve = %+v, %v; want a new claim", i, res, err)
			}
		}
	})
}

// A release that reaches the store before its claim turns the claim into
// a no-op.
func TestReleaseRetrierBeforeTheClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		h := newHung(t)
		r := keystore.NewReleaseRetrier(h, keystore.ReleaseRetrierOptions{})
		defer r.Close(ctx)
		k, id := keystore.NewKey("k"), keystore.NewClaimID()
		r.Add(k, id, lease)
		synctest.Wait()
		if st := r.Stats(); st.Released != 1 {
			t.Fatalf("Stats = %+v; want 1 released", st)
		}
		if _, err := h.Reserve(ctx, k, claimOpts(id)); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Errorf("the late claim = %v; want ErrLeaseLost", err)
		}
		if res, err := h.Reserve(ctx, k, claimOpts(keystore.NewClaimID())); err != nil || res.Token == 0 {
			t.Errorf("a retry = %+v, %v; want a claim", res, err)
		}
	})
}

func TestReleaseRetrierBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHung(t)
		h.down.Store(true)
		r := keystore.NewReleaseRetrier(h, keystore.ReleaseRetrierOptions{MaxPending: 3})
		for i := range 5 {
			want := i < 3
			if got := r.Add(keystore.NewKey(string(rune(i))), keystore.NewClaimID(), lease); got != want {
				t.Errorf("Add #%d = %v; want %v", i, got, want)
			}
		}
		if st := r.Stats(); st.Pending != 3 || st.Dropped != 2 {
			t.Errorf("Stats = %+v; want 3 pending, 2 dropped", st)
		}
		// Shutdown with the store still down: the deadline drops the rest.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		err := r.Close(ctx)
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close = %v; want an error counting the dropped releases", err)
		}
		if took := time.Since(start); took != 5*time.Second {
			t.Errorf("Close took %v; want the 5s deadline", took)
		}
		if st := r.Stats(); st.Pending != 0 || st.Dropped != 5 || st.Released != 0 {
			t.Errorf("Stats after Close = %+v; want 0 pending, 5 dropped", st)
		}
		if r.Add(keystore.NewKey("late"), keystore.NewClaimID(), lease) {
			t.Errorf("Add after Close = true; want false")
		}
		if st := r.Stats(); st.Dropped != 6 {
			t.Errorf("Dropped after a late Add = %d; want 6", st.Dropped)
		}
		if err := r.Close(ctx); err != nil {
			t.Errorf("second Close = %v; want nil", err)
		}
	})
}

// Close flushes what it can before its deadline.
func TestReleaseRetrierCloseFlushes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHung(t)
		h.down.Store(true)
		r := keystore.NewReleaseRetrier(h, keystore.ReleaseRetrierOptions{})
		for i := range 10 {
			r.Add(keystore.NewKey(string(rune(i))), keystore.NewClaimID(), lease)
		}
		time.Sleep(3 * time.Second)
		go func() {
			time.Sleep(2 * time.Second)
			h.down.Store(false)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		if err := r.Close(ctx); err != nil {
			t.Errorf("Close = %v; want nil (all released)", err)
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("Close took %v; want about 2s (until the store answered)", took)
		}
		if st := r.Stats(); st.Released != 10 || st.Dropped != 0 || st.Pending != 0 {
			t.Errorf("Stats = %+v; want 10 released", st)
		}
	})
}

// A release that keeps failing on its own does not hold the others back.
func TestReleaseRetrierPoisonedRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHung(t)
		h.poison = keystore.NewKey("poison")
		r := keystore.NewReleaseRetrier(h, keystore.ReleaseRetrierOptions{})
		r.Add(h.poison, keystore.NewClaimID(), lease)
		for i := range 5 {
			r.Add(keystore.NewKey(string(rune(i))), keystore.NewClaimID(), lease)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if st := r.Stats(); st.Released != 5 || st.Pending != 1 || st.Oldest != time.Second {
			t.Errorf("Stats = %+v; want 5 released, the poisoned one pending for 1s", st)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := r.Close(ctx); err == nil {
			t.Errorf("Close = nil; want the poisoned release counted as dropped")
		}
		if st := r.Stats(); st.Dropped != 1 {
			t.Errorf("Dropped = %d; want 1", st.Dropped)
		}
	})
}
