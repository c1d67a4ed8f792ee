package metered

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// TestErrors: the decorator classifies errors, forwards the admin
// operations, and works unregistered.
func TestErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := memstore.New(memstore.Options{MaxEntries: 1})
	t.Cleanup(func() { st.Close() })
	ms := New(st, prometheus.NewPedanticRegistry())
	opts := keystore.ReserveOptions{Lease: time.Minute, Retention: time.Hour}
	res, err := ms.Reserve(ctx, keystore.NewKey("a"), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Reserve(ctx, keystore.NewKey("a"), opts); !errors.Is(err, keystore.ErrInFlight) {
		t.Fatalf("second Reserve = %v; want ErrInFlight", err)
	}
	if _, err := ms.Reserve(ctx, keystore.NewKey("b"), opts); !errors.Is(err, keystore.ErrFull) {
		t.Fatalf("Reserve on a full store = %v; want ErrFull", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	ms.Get(cctx, keystore.NewKey("a"))
	if recs, err := ms.InFlight(ctx, 0, 10); err != nil || len(recs) != 1 {
		t.Errorf("InFlight = %d records, %v; want 1", len(recs), err)
	}
	if err := ms.ForceComplete(ctx, keystore.NewKey("a"), &keystore.Response{Status: 200}); err != nil {
		t.Errorf("ForceComplete = %v", err)
	}
	if err := ms.Complete(ctx, keystore.NewKey("a"), res.Token, &keystore.Response{Status: 201}); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Errorf("late Complete = %v; want ErrLeaseLost", err)
	}
	for _, c := range []struct {
		op, kind string
		want     float64
	}{
		{opReserve, "full", 1},
		{opGet, "canceled", 1},
	} {
		if got := testutil.ToFloat64(ms.errs.WithLabelValues(c.op, c.kind)); got != c.want {
			t.Errorf("store errors{%s,%s} = %v; want %v", c.op, c.kind, got, c.want)
		}
	}
	if got, want := testutil.CollectAndCount(ms.errs), 5*3+1; got != want { // made at 0: 5 ops × 3 kinds; counted: get canceled
		t.Errorf("store error series = %d; want %d (in flight and lease lost are not errors)", got, want)
	}
	if got := testutil.ToFloat64(ms.late); got != 1 {
		t.Errorf("late completions = %v; want 1", got)
	}
	// Unregistered, it forwards; a store without admin operations says so.
	plain := New(noAdmin{st}, nil)
	if _, err := plain.Get(ctx, keystore.NewKey("a")); err != nil {
		t.Errorf("Get through an unregistered Store = %v", err)
	}
	if err := plain.ForceRelease(ctx, keystore.NewKey("a")); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("ForceRelease without admin = %v; want ErrUnsupported", err)
	}
}

// noAdmin hides a store's admin operations.
type noAdmin struct{ keystore.Store }

// TestCompleteClaim: the decorator forwards the claim operations, and its
// late-completion counter counts only a real fence rejection (another claim
// holds the key) — not a repeat of a completion that was stored already,
// nor a record recreated after it vanished.
func TestCompleteClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := memstore.New(memstore.Options{})
	t.Cleanup(func() { st.Close() })
	ms := New(st, prometheus.NewPedanticRegistry())
	var cs keystore.Store = ms
	opts := keystore.ReserveOptions{Lease: time.Minute, Retention: time.Hour, ClaimID: keystore.NewClaimID()}
	k := keystore.NewKey("a")
	res, err := cs.Reserve(ctx, k, opts)
	if err != nil {
		t.Fatal(err)
	}
	resp := &keystore.Response{Status: 201}
	for i := range 3 { // the first stores; the repeats (replies lost) change nothing
		if how, err := cs.CompleteClaim(ctx, k, res.Claim, resp); err != nil || how != keystore.Completed {
			t.Fatalf("CompleteClaim #%d = %v, %v; want completed", i+1, how, err)
		}
	}
	// A claim an operator released meanwhile.
	k2 := keystore.NewKey("b")
	res2, err := cs.Reserve(ctx, k2, keystore.ReserveOptions{Lease: time.Minute, Retention: time.Hour, ClaimID: keystore.NewClaimID()})
	if err != nil {
		t.Fatal(err)
	}
	if err := ms.ForceRelease(ctx, k2); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(ms.late); got != 0 {
		t.Fatalf("late completions = %v after repeats; want 0", got)
	}
	// A released record is another claim's business: a real rejection.
	if _, err := cs.CompleteClaim(ctx, k2, res2.Claim, resp); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("CompleteClaim after a release = %v; want ErrLeaseLost", err)
	}
	if got := testutil.ToFloat64(ms.late); got != 1 {
		t.Errorf("late completions = %v; want 1", got)
	}
	// ReleaseClaim is forwarded and timed.
	if err := cs.ReleaseClaim(ctx, keystore.NewKey("c"), keystore.NewClaimID(), time.Minute); err != nil {
		t.Errorf("ReleaseClaim = %v", err)
	}
	// reserve, complete, release, renew and get exist from the start;
	// complete_claim, force_release and release_claim were used.
	if n := testutil.CollectAndCount(ms.duration); n != 8 {
		t.Errorf("duration series = %d; want 8", n)
	}
}

// damagedListing is a memory store whose listing reports one damaged
// record, as a Redis store does for a foreign value.
type damagedListing struct{ *memstore.Store }

func (d damagedListing) InFlight(ctx context.Context, olderThan time.Duration, limit int) ([]keystore.Record, error) {
	recs, _ := d.Store.InFlight(ctx, olderThan, limit)
	dmg := &keystore.DamagedError{}
	dmg.Add("idemgate:{foreign}", errors.New("corrupt"))
	return recs, dmg
}

// TestInFlightDamaged: a listing that skipped a damaged record passes its
// records and the DamagedError through, and is no store error (the admin
// API counts damaged records itself).
func TestInFlightDamaged(t *testing.T) {
	t.Parallel()
	st := memstore.New(memstore.Options{})
	t.Cleanup(func() { st.Close() })
	ms := New(damagedListing{st}, prometheus.NewPedanticRegistry())
	ctx := context.Background()
	if _, err := ms.Reserve(ctx, keystore.NewKey("a"), keystore.ReserveOptions{Lease: time.Minute, Retention: time.Hour}); err != nil {
		t.Fatal(err)
	}
	recs, err := ms.InFlight(ctx, 0, 10)
	var dmg *keystore.DamagedError
	if len(recs) != 1 || !errors.As(err, &dmg) || dmg.Count != 1 {
		t.Errorf("InFlight = %d records, %v; want 1 and the DamagedError", len(recs), err)
	}
	for _, kind := range []string{"unavailable", "timeout", "canceled"} {
		if got := testutil.ToFloat64(ms.errs.WithLabelValues(opInFlight, kind)); got != 0 {
			t.Errorf("store errors{in_flight,%s} = %v; want 0", kind, got)
		}
	}
}
