package proxy

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// TestLeaseRenewal runs on the real clock with short leases: a renewed claim
// outlives its first lease, stops being renewed at max_lease, and stop ends
// the renewals.
func TestLeaseRenewal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := memstore.New(memstore.Options{})
	t.Cleanup(func() { st.Close() })
	var rn renewer
	rn.init(st, slog.New(slog.DiscardHandler))
	claim := func(k keystore.Key, lease time.Duration) keystore.Reservation {
		res, err := st.Reserve(ctx, k, keystore.ReserveOptions{Lease: lease, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	takenOver := func(k keystore.Key, lease time.Duration) bool {
		_, err := st.Reserve(ctx, k, keystore.ReserveOptions{Lease: lease, Retention: time.Hour})
		return err == nil
	}

	const lease = 300 * time.Millisecond
	renewed := keystore.NewKey("renewed")
	h := rn.start(renewed, claim(renewed, lease).Token, lease, time.Hour)
	deadline := time.Now().Add(5 * lease)
	for time.Now().Before(deadline) {
		if takenOver(renewed, lease) {
			t.Fatalf("a renewed claim was taken over")
		}
		time.Sleep(lease / 6)
	}
	h.stop()
	waitFor(t, func() bool { return takenOver(renewed, lease) }) // after stop, the lease ends

	capped := keystore.NewKey("capped")
	h2 := rn.start(capped, claim(capped, lease).Token, lease, 2*lease)
	waitFor(t, func() bool { return takenOver(capped, lease) }) // max_lease reached
	h2.stop()
	rn.close()

	// A lost lease stops renewing quietly.
	lost := keystore.NewKey("lost")
	res := claim(lost, lease)
	if err := st.Release(ctx, lost, res.Token); err != nil {
		t.Fatal(err)
	}
	h3 := rn.start(lost, res.Token, lease, time.Hour)
	time.Sleep(lease / 2)
	h3.stop()
	if _, err := st.Renew(ctx, lost, res.Token, lease); !errors.Is(err, keystore.ErrNotFound) {
		t.Errorf("Renew after release = %v; want ErrNotFound", err)
	}
	rn.close()
}
