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
	if err := plain.ForceRelease(ctx, keystore.NewKey("a")); !errors.Is(err, errNoAdmin) {
		t.Errorf("ForceRelease without admin = %v; want errNoAdmin", err)
	}
}

// noAdmin hides a store's admin operations.
type noAdmin struct{ keystore.Store }
