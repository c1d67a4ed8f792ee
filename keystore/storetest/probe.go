package storetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// probeTTL is the probe lease the suite takes: short, since a Redis
// lease ends by Redis's own clock, which advance does not move.
const probeTTL = 300 * time.Millisecond

// untilProbe advances the clock in small steps (and lets real time pass,
// for a store whose leases end by a real clock) until a probe lease of k
// can be taken, for up to 5 s of real time.
func untilProbe(t *testing.T, us keystore.UnknownStore, k keystore.Key, advance func(time.Duration)) keystore.ProbeLease {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		advance(50 * time.Millisecond)
		l, ok, err := us.AcquireProbe(t.Context(), k, probeTTL)
		if err != nil {
			t.Fatalf("AcquireProbe: %v", err)
		}
		if ok {
			return l
		}
		<-time.After(20 * time.Millisecond)
	}
	t.Fatalf("the probe lease of %v was never free again", k)
	return keystore.ProbeLease{}
}

// One probe lease per record at a time: N racing takers, one wins; its
// state round-trips; a hold keeps everyone out; a lapsed lease's owner
// can no longer record.
func testProbeLease(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	us := unknowns(t, s)
	ctx := t.Context()
	k := NewTestKey(t)
	if _, ok, err := us.ProbeStatus(ctx, k); ok || err != nil {
		t.Fatalf("ProbeStatus of a record never probed = %v, %v; want none", ok, err)
	}
	const n = 32
	var wins, busy atomic.Int64
	var owner atomic.Value
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			l, ok, err := us.AcquireProbe(context.Background(), k, time.Minute)
			switch {
			case err != nil:
				t.Errorf("AcquireProbe: %v", err)
			case ok:
				wins.Add(1)
				owner.Store(l.Owner)
				if l.State != (keystore.ProbeState{}) {
					t.Errorf("the first lease's state = %+v; want zero", l.State)
				}
			default:
				busy.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 || busy.Load() != n-1 {
		t.Fatalf("AcquireProbe: %d won, %d found it held; want 1, %d", wins.Load(), busy.Load(), n-1)
	}
	if err := us.EndProbe(ctx, k, "someone-else", keystore.ProbeState{Probes: 9}, 0, time.Minute); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Errorf("EndProbe by another owner = %v; want ErrLeaseLost", err)
	}
	at := time.UnixMilli(time.Now().UnixMilli())
	want := keystore.ProbeState{ClaimID: keystore.NewClaimID(), Probes: 2, Last: keystore.ProbeAbsent, LastAt: at, AbsentSince: at.Add(-time.Second)}
	if err := us.EndProbe(ctx, k, owner.Load().(string), want, probeTTL, time.Hour); err != nil {
		t.Fatalf("EndProbe: %v", err)
	}
	if st, ok, err := us.ProbeStatus(ctx, k); err != nil || !ok || !sameProbeState(st, want) {
		t.Errorf("ProbeStatus = %+v, %v, %v; want %+v", st, ok, err, want)
	}
	if _, ok, err := us.AcquireProbe(ctx, k, probeTTL); ok || err != nil {
		t.Errorf("AcquireProbe during the hold = %v, %v; want held", ok, err)
	}
	l := untilProbe(t, us, k, advance)
	if !sameProbeState(l.State, want) {
		t.Errorf("the next lease's state = %+v; want %+v", l.State, want)
	}
	// A lease that lapsed and was taken again fences its first owner out.
	next := untilProbe(t, us, k, advance)
	if err := us.EndProbe(ctx, k, l.Owner, keystore.ProbeState{Probes: 99}, 0, time.Hour); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Errorf("EndProbe of a lapsed lease = %v; want ErrLeaseLost", err)
	}
	// Hold 0 gives the lease up at once.
	if err := us.EndProbe(ctx, k, next.Owner, want, 0, time.Hour); err != nil {
		t.Fatalf("EndProbe(hold 0): %v", err)
	}
	if _, ok, err := us.AcquireProbe(ctx, k, probeTTL); !ok || err != nil {
		t.Errorf("AcquireProbe after a lease given up = %v, %v; want it taken", ok, err)
	}
	if err := us.EndProbe(ctx, NewTestKey(t), next.Owner, want, 0, time.Hour); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Errorf("EndProbe of a key never leased = %v; want ErrLeaseLost", err)
	}
}

func sameProbeState(a, b keystore.ProbeState) bool {
	return a.ClaimID == b.ClaimID && a.Probes == b.Probes && a.Last == b.Last && a.LastAt.Equal(b.LastAt) &&
		a.AbsentSince.Equal(b.AbsentSince) && a.Resolved == b.Resolved
}
