package proxy

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// TestLeaseRenewal runs in a synctest bubble, on its fake clock: a renewed
// claim outlives its first lease many times, stops being renewed at
// max_lease, and stop ends the renewals; a lost lease stops renewing
// quietly.
func TestLeaseRenewal(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New(memstore.Options{})
		defer st.Close()
		var rn renewer
		rn.init(st, slog.New(slog.DiscardHandler), time.Now)
		claim := func(k keystore.Key, lease time.Duration) keystore.Reservation {
			res, err := st.Reserve(ctx, k, keystore.ReserveOptions{Lease: lease, Retention: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		takenOver := func(k keystore.Key, lease time.Duration) bool {
			synctest.Wait() // every renewal due by now has run
			_, err := st.Reserve(ctx, k, keystore.ReserveOptions{Lease: lease, Retention: time.Hour})
			return err == nil
		}

		const lease = 300 * time.Millisecond
		renewed := keystore.NewKey("renewed")
		h := rn.start(renewed, claim(renewed, lease).Token, lease, time.Hour)
		for i := range 30 { // five leases
			time.Sleep(lease / 6)
			if takenOver(renewed, lease) {
				t.Fatalf("a renewed claim was taken over after %v", time.Duration(i+1)*lease/6)
			}
		}
		h.stop()
		h.finish()
		time.Sleep(lease + time.Millisecond)
		if !takenOver(renewed, lease) {
			t.Error("a lease after stop = still held; want it ended")
		}

		capped := keystore.NewKey("capped")
		h2 := rn.start(capped, claim(capped, lease).Token, lease, 2*lease)
		time.Sleep(2*lease - time.Millisecond)
		if takenOver(capped, lease) {
			t.Error("a claim within max_lease was taken over")
		}
		time.Sleep(2 * time.Millisecond)
		if !takenOver(capped, lease) {
			t.Error("a claim at max_lease = still held; want its last renewal to end there")
		}
		h2.stop()
		h2.finish()
		rn.close(context.Background())

		lost := keystore.NewKey("lost")
		res := claim(lost, lease)
		if err := st.Release(ctx, lost, res.Token); err != nil {
			t.Fatal(err)
		}
		h3 := rn.start(lost, res.Token, lease, time.Hour)
		time.Sleep(lease / 2)
		h3.stop()
		h3.finish()
		if _, err := st.Renew(ctx, lost, res.Token, lease); !errors.Is(err, keystore.ErrNotFound) {
			t.Errorf("Renew after release = %v; want ErrNotFound", err)
		}
		rn.close(context.Background())
	})
}

// A claim's record may hand work to the background (a completion that
// failed) while a shutdown's close waits for the claims: close waits for
// that work too, and the WaitGroup never goes from zero to one under it
// (before, the claim's count ended at stop, before its record, and a
// shutdown met a failed completion with "WaitGroup is reused before
// previous Wait has returned").
func TestRenewerCloseWaitsForTheRecordsWork(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := memstore.New(memstore.Options{})
		defer st.Close()
		var rn renewer
		rn.init(st, slog.New(slog.DiscardHandler), time.Now)
		k := keystore.NewKey("record-then-close")
		res, err := st.Reserve(context.Background(), k, keystore.ReserveOptions{Lease: time.Second, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		h := rn.start(k, res.Token, time.Second, time.Hour)
		closed := make(chan [2]int64, 1)
		go func() {
			tasks, claims := rn.close(context.Background())
			closed <- [2]int64{tasks, claims}
		}()
		synctest.Wait() // close waits for the claim
		h.stop()
		ran := false
		rn.background(func(context.Context) { time.Sleep(time.Second); ran = true })
		h.finish()
		if got := <-closed; got != [2]int64{} || !ran {
			t.Errorf("close = %v, background work ran %v; want it to wait for the work, nothing abandoned", got, ran)
		}
	})
}
