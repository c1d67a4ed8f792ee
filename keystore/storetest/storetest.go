// Package storetest is the conformance suite every [keystore.Store] backend
// must pass, and the benchmarks they share.
//
// A backend's test calls [Run] with a [Factory] that makes a fresh, empty
// store and a function that moves that store's clock forward:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) (keystore.Store, func(time.Duration)) {
//			clk := newFakeClock()
//			s := memstore.New(memstore.Options{Now: clk.Now})
//			t.Cleanup(func() { s.Close() })
//			return s, clk.Advance
//		})
//	}
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// Factory returns a new, empty store and a function that advances the
// store's clock by d: after advance returns, the store must behave as if d
// had elapsed (leases ended, records expired). The factory registers the
// store's cleanup with t.
type Factory func(t *testing.T) (s keystore.Store, advance func(d time.Duration))

// Durations the suite uses. Backends whose clock is real (advance waits)
// still finish quickly: the suite never advances by more than a few leases.
const (
	Lease     = 2 * time.Second
	Retention = 10 * time.Second
)

var keySeq atomic.Uint64

// NewTestKey returns a key no other test in this process uses, so that
// suites may share one backend (a real Redis).
func NewTestKey(t testing.TB) keystore.Key {
	return keystore.NewKey("storetest", t.Name(), fmt.Sprint(time.Now().UnixNano()), fmt.Sprint(keySeq.Add(1)))
}

func fp(s string) keystore.Fingerprint { return keystore.Fingerprint(keystore.NewKey("fp", s)) }

func opts(fingerprint string) keystore.ReserveOptions {
	return keystore.ReserveOptions{Fingerprint: fp(fingerprint), Route: "route_a", Lease: Lease, Retention: Retention}
}

// sampleResponse has a binary body with every byte value, repeated headers
// whose order matters, and an empty value.
func sampleResponse() *keystore.Response {
	body := make([]byte, 0, 512)
	for i := range 512 {
		body = append(body, byte(i))
	}
	return &keystore.Response{
		Status: 201,
		Header: http.Header{
			"Content-Type": {"application/octet-stream"},
			"Set-Cookie":   {"b=2", "a=1"},
			"X-Empty":      {""},
			"Location":     {"/ucp/v1/carts/42"},
		},
		Body: body,
	}
}

// Run runs the conformance suite against the stores f makes.
func Run(t *testing.T, f Factory) {
	t.Helper()
	ctx := context.Background()

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		s, _ := f(t)
		k := NewTestKey(t)
		if _, err := s.Get(ctx, k); !errors.Is(err, keystore.ErrNotFound) {
			t.Errorf("Get(unknown) = %v; want ErrNotFound", err)
		}
		if err := s.Complete(ctx, k, 1, sampleResponse()); !errors.Is(err, keystore.ErrNotFound) {
			t.Errorf("Complete(unknown) = %v; want ErrNotFound", err)
		}
		if err := s.Release(ctx, k, 1); !errors.Is(err, keystore.ErrNotFound) {
			t.Errorf("Release(unknown) = %v; want ErrNotFound", err)
		}
		if _, err := s.Renew(ctx, k, 1, Lease); !errors.Is(err, keystore.ErrNotFound) {
			t.Errorf("Renew(unknown) = %v; want ErrNotFound", err)
		}
	})

	t.Run("ClaimThenInFlight", func(t *testing.T) {
		t.Parallel()
		s, _ := f(t)
		k := NewTestKey(t)
		res := mustReserve(t, s, k, opts("a"))
		if res.Token == 0 || res.Response != nil || res.Takeover {
			t.Fatalf("first Reserve = %+v; want a new claim with a token", res)
		}
		if res.LeaseEnd.IsZero() {
			t.Errorf("LeaseEnd is zero; want the lease's end")
		}
		if _, err := s.Reserve(ctx, k, opts("a")); !errors.Is(err, keystore.ErrInFlight) {
			t.Errorf("second Reserve, same fingerprint = %v; want ErrInFlight", err)
		}
		if _, err := s.Reserve(ctx, k, opts("b")); !errors.Is(err, keystore.ErrFingerprintMismatch) {
			t.Errorf("second Reserve, other fingerprint = %v; want ErrFingerprintMismatch", err)
		}
		rec, err := s.Get(ctx, k)
		if err != nil {
			t.Fatalf("Get = %v", err)
		}
		if rec.State != keystore.StateInFlight || rec.Token != res.Token || rec.Fingerprint != fp("a") || rec.Route != "route_a" || rec.Key != k {
			t.Errorf("Get = %+v; want in flight, token %d, fingerprint a, route_a", rec, res.Token)
		}
		if rec.LeaseEnd.IsZero() || rec.Claimed.IsZero() || !rec.Expires.After(rec.LeaseEnd) {
			t.Errorf("Get times: claimed %v, lease end %v, expires %v; want set, expires after lease end", rec.Claimed, rec.LeaseEnd, rec.Expires)
		}
	})

	t.Run("KeysAreIndependent", func(t *testing.T) {
		t.Parallel()
		s, _ := f(t)
		k1, k2 := NewTestKey(t), NewTestKey(t)
		mustReserve(t, s, k1, opts("a"))
		if res := mustReserve(t, s, k2, opts("a")); res.Token == 0 {
			t.Errorf("Reserve(k2) = %+v; want a claim", res)
		}
	})

	t.Run("ReplayIsByteIdentical", func(t *testing.T) {
		t.Parallel()
		s, _ := f(t)
		k := NewTestKey(t)
		res := mustReserve(t, s, k, opts("a"))
		want := sampleResponse()
		if err := s.Complete(ctx, k, res.Token, want); err != nil {
			t.Fatalf("Complete = %v", err)
		}
		for i := range 2 {
			got := mustReserve(t, s, k, opts("a"))
			if got.Response == nil || got.Token != 0 {
				t.Fatalf("Reserve #%d after Complete = %+v; want a replay", i, got)
			}
			assertResponse(t, got.Response, want)
		}
		rec, err := s.Get(ctx, k)
		if err != nil {
			t.Fatalf("Get = %v", err)
		}
		if rec.State != keystore.StateCompleted || rec.Response == nil {
			t.Fatalf("Get = %+v; want completed with a response", rec)
		}
		assertResponse(t, rec.Response, want)
		if err := s.Complete(ctx, k, res.Token, sampleResponse()); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Errorf("second Complete = %v; want ErrLeaseLost", err)
		}
		if err := s.Release(ctx, k, res.Token); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Errorf("Release after Complete = %v; want ErrLeaseLost", err)
		}
	})

	t.Run("EmptyAndNilBodies", func(t *testing.T) {
		t.Parallel()
		s, _ := f(t)
		for _, want := range []*keystore.Response{
			{Status: 204},
			{Status: 200, Header: http.Header{}, Body: []byte{}},
			{Status: 500, Header: http.Header{"X-A": {"1"}}},
		} {
			k := NewTestKey(t)
			res := mustReserve(t, s, k, opts("a"))
			if err := s.Complete(ctx, k, res.Token, want); err != nil {
				t.Fatalf("Complete = %v", err)
			}
			got := mustReserve(t, s, k, opts("a"))
			if got.Response == nil {
				t.Fatalf("Reserve after Complete = %+v; want a replay", got)
			}
			assertResponse(t, got.Response, want)
		}
	})

	t.Run("MismatchDoesNotPoison", func(t *testing.T) {
		t.Parallel()
		s, _ := f(t)
		k := NewTestKey(t)
		res := mustReserve(t, s, k, opts("a"))
		if err := s.Complete(ctx, k, res.Token, sampleResponse()); err != nil {
			t.Fatalf("Complete = %v", err)
		}
		for range 3 {
			if _, err := s.Reserve(ctx, k, opts("b")); !errors.Is(err, keystore.ErrFingerprintMismatch) {
				t.Errorf("Reserve(other fingerprint) = %v; want ErrFingerprintMismatch", err)
			}
		}
		got := mustReserve(t, s, k, opts("a"))
		if got.Response == nil {
			t.Fatalf("Reserve(original) = %+v; want a replay", got)
		}
		assertResponse(t, got.Response, sampleResponse())
	})

	t.Run("TooLarge", func(t *testing.T) {
		t.Parallel()
		s, _ := f(t)
		k := NewTestKey(t)
		res := mustReserve(t, s, k, opts("a"))
		if err := s.Complete(ctx, k, res.Token, &keystore.Response{Status: 200, TooLarge: true}); err != nil {
			t.Fatalf("Complete = %v", err)
		}
		got := mustReserve(t, s, k, opts("a"))
		if got.Response == nil || !got.Response.TooLarge || got.Response.Status != 200 {
			t.Errorf("Reserve = %+v; want a too-large record with status 200", got)
		}
	})

	t.Run("ReleaseAllowsRetry", func(t *testing.T) {
		t.Parallel()
		s, _ := f(t)
		k := NewTestKey(t)
		first := mustReserve(t, s, k, opts("a"))
		if err := s.Release(ctx, k, first.Token); err != nil {
			t.Fatalf("Release = %v", err)
		}
		if rec, err := s.Get(ctx, k); err == nil && rec.State != keystore.StateReleased {
			t.Errorf("Get after Release = %+v; want ErrNotFound or released", rec)
		} else if err != nil && !errors.Is(err, keystore.ErrNotFound) {
			t.Errorf("Get after Release = %v; want ErrNotFound or released", err)
		}
		// A released key is free: even another request may claim it.
		second := mustReserve(t, s, k, opts("b"))
		if second.Token == 0 || second.Token == first.Token || second.Response != nil {
			t.Fatalf("Reserve after Release = %+v; want a new claim with a new token (old %d)", second, first.Token)
		}
		if err := s.Complete(ctx, k, first.Token, sampleResponse()); !isLost(err) {
			t.Errorf("Complete with the released token = %v; want ErrLeaseLost", err)
		}
		if err := s.Release(ctx, k, first.Token); !isLost(err) {
			t.Errorf("second Release with the released token = %v; want ErrLeaseLost", err)
		}
		if err := s.Complete(ctx, k, second.Token, sampleResponse()); err != nil {
			t.Errorf("Complete with the new token = %v", err)
		}
	})

	t.Run("TakeoverAfterLease", func(t *testing.T) {
		t.Parallel()
		s, advance := f(t)
		k := NewTestKey(t)
		old := mustReserve(t, s, k, opts("a"))
		advance(Lease / 2)
		if _, err := s.Reserve(ctx, k, opts("a")); !errors.Is(err, keystore.ErrInFlight) {
			t.Fatalf("Reserve within the lease = %v; want ErrInFlight", err)
		}
		advance(Lease/2 + 100*time.Millisecond)
		if _, err := s.Reserve(ctx, k, opts("b")); !errors.Is(err, keystore.ErrFingerprintMismatch) {
			t.Errorf("Reserve(other fingerprint) after lease = %v; want ErrFingerprintMismatch", err)
		}
		nw := mustReserve(t, s, k, opts("a"))
		if !nw.Takeover || nw.Token <= old.Token {
			t.Fatalf("Reserve after lease = %+v; want a takeover with a token > %d", nw, old.Token)
		}
		if _, err := s.Reserve(ctx, k, opts("a")); !errors.Is(err, keystore.ErrInFlight) {
			t.Errorf("Reserve after takeover = %v; want ErrInFlight", err)
		}
		if _, err := s.Renew(ctx, k, old.Token, Lease); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Errorf("late Renew = %v; want ErrLeaseLost", err)
		}
		if err := s.Complete(ctx, k, old.Token, &keystore.Response{Status: 299}); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Errorf("late Complete = %v; want ErrLeaseLost", err)
		}
		if err := s.Release(ctx, k, old.Token); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Errorf("late Release = %v; want ErrLeaseLost", err)
		}
		want := sampleResponse()
		if err := s.Complete(ctx, k, nw.Token, want); err != nil {
			t.Fatalf("Complete by the new holder = %v", err)
		}
		got := mustReserve(t, s, k, opts("a"))
		if got.Response == nil {
			t.Fatalf("Reserve = %+v; want a replay", got)
		}
		assertResponse(t, got.Response, want)
	})

	t.Run("LateCompleteWithoutTakeover", func(t *testing.T) {
		t.Parallel()
		s, advance := f(t)
		k := NewTestKey(t)
		res := mustReserve(t, s, k, opts("a"))
		advance(Lease + 100*time.Millisecond)
		if err := s.Complete(ctx, k, res.Token, sampleResponse()); err != nil {
			t.Fatalf("Complete after the lease, nobody took over = %v; want success", err)
		}
		if got := mustReserve(t, s, k, opts("a")); got.Response == nil {
			t.Errorf("Reserve = %+v; want a replay", got)
		}
	})

	t.Run("RenewExtendsLease", func(t *testing.T) {
		t.Parallel()
		s, advance := f(t)
		k := NewTestKey(t)
		res := mustReserve(t, s, k, opts("a"))
		advance(Lease / 2)
		end, err := s.Renew(ctx, k, res.Token, Lease)
		if err != nil {
			t.Fatalf("Renew = %v", err)
		}
		if !end.After(res.LeaseEnd) {
			t.Errorf("Renew end %v; want after the first lease end %v", end, res.LeaseEnd)
		}
		advance(Lease/2 + 200*time.Millisecond) // past the first lease, within the renewed one
		if _, err := s.Reserve(ctx, k, opts("a")); !errors.Is(err, keystore.ErrInFlight) {
			t.Errorf("Reserve after the first lease, within the renewal = %v; want ErrInFlight", err)
		}
	})

	t.Run("RetentionExpiry", func(t *testing.T) {
		t.Parallel()
		s, advance := f(t)
		k := NewTestKey(t)
		res := mustReserve(t, s, k, opts("a"))
		if err := s.Complete(ctx, k, res.Token, sampleResponse()); err != nil {
			t.Fatalf("Complete = %v", err)
		}
		advance(Retention - time.Second)
		if got := mustReserve(t, s, k, opts("a")); got.Response == nil {
			t.Fatalf("Reserve before retention ends = %+v; want a replay", got)
		}
		advance(time.Second + 100*time.Millisecond)
		if _, err := s.Get(ctx, k); !errors.Is(err, keystore.ErrNotFound) {
			t.Errorf("Get after retention = %v; want ErrNotFound", err)
		}
		if got := mustReserve(t, s, k, opts("b")); got.Token == 0 {
			t.Errorf("Reserve after retention = %+v; want a new claim", got)
		}
	})

	t.Run("ConcurrentReserveOneWinner", func(t *testing.T) {
		t.Parallel()
		s, _ := f(t)
		k := NewTestKey(t)
		wins, inFlight, other := race(t, 64, func() error {
			_, err := s.Reserve(ctx, k, opts("a"))
			return err
		})
		if wins != 1 || inFlight != 63 || other != 0 {
			t.Errorf("64 racing Reserves: %d wins, %d in flight, %d other; want 1, 63, 0", wins, inFlight, other)
		}
	})

	t.Run("ConcurrentTakeoverOneWinner", func(t *testing.T) {
		t.Parallel()
		s, advance := f(t)
		k := NewTestKey(t)
		mustReserve(t, s, k, opts("a"))
		advance(Lease + 100*time.Millisecond)
		var takeovers atomic.Int64
		wins, inFlight, other := race(t, 64, func() error {
			res, err := s.Reserve(ctx, k, opts("a"))
			if err == nil && res.Takeover {
				takeovers.Add(1)
			}
			return err
		})
		if wins != 1 || inFlight != 63 || other != 0 || takeovers.Load() != 1 {
			t.Errorf("64 racing takeovers: %d wins (%d takeovers), %d in flight, %d other; want 1 (1), 63, 0", wins, takeovers.Load(), inFlight, other)
		}
	})

	t.Run("ConcurrentCompleteAndTakeover", func(t *testing.T) {
		t.Parallel()
		s, advance := f(t)
		for range 20 {
			k := NewTestKey(t)
			old := mustReserve(t, s, k, opts("a"))
			advance(Lease + 100*time.Millisecond)
			var completeErr, reserveErr error
			var res keystore.Reservation
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); completeErr = s.Complete(ctx, k, old.Token, sampleResponse()) }()
			go func() { defer wg.Done(); res, reserveErr = s.Reserve(ctx, k, opts("a")) }()
			wg.Wait()
			switch {
			case completeErr == nil && reserveErr == nil && res.Response != nil:
				// Complete first, then a replay.
			case completeErr != nil && errors.Is(completeErr, keystore.ErrLeaseLost) && reserveErr == nil && res.Takeover:
				// Takeover first, then the late completion is fenced.
			default:
				t.Fatalf("Complete = %v, Reserve = %+v, %v; want complete-then-replay or takeover-then-fenced", completeErr, res, reserveErr)
			}
		}
	})

	t.Run("CancelledContext", func(t *testing.T) {
		t.Parallel()
		s, _ := f(t)
		k := NewTestKey(t)
		res := mustReserve(t, s, k, opts("a"))
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		check := func(name string, err error) {
			t.Helper()
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context = %v; want context.Canceled", name, err)
			}
		}
		_, err := s.Reserve(cctx, NewTestKey(t), opts("a"))
		check("Reserve", err)
		check("Complete", s.Complete(cctx, k, res.Token, sampleResponse()))
		check("Release", s.Release(cctx, k, res.Token))
		_, err = s.Renew(cctx, k, res.Token, Lease)
		check("Renew", err)
		_, err = s.Get(cctx, k)
		check("Get", err)
		// Nothing happened: the claim is still in flight.
		if rec, err := s.Get(ctx, k); err != nil || rec.State != keystore.StateInFlight {
			t.Errorf("Get = %+v, %v; want still in flight", rec, err)
		}
	})

	t.Run("CloseIsIdempotent", func(t *testing.T) {
		t.Parallel()
		s, _ := f(t)
		if err := s.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("second Close = %v; want nil", err)
		}
		if _, err := s.Reserve(ctx, NewTestKey(t), opts("a")); !errors.Is(err, keystore.ErrClosed) {
			t.Errorf("Reserve after Close = %v; want ErrClosed", err)
		}
	})

	t.Run("Admin", func(t *testing.T) {
		t.Parallel()
		s, advance := f(t)
		a, ok := s.(keystore.Admin)
		if !ok {
			t.Skip("store does not implement keystore.Admin")
		}
		stuck, fresh, done := NewTestKey(t), NewTestKey(t), NewTestKey(t)
		stuckRes := mustReserve(t, s, stuck, opts("a"))
		d := mustReserve(t, s, done, opts("a"))
		if err := s.Complete(ctx, done, d.Token, sampleResponse()); err != nil {
			t.Fatal(err)
		}
		advance(time.Second)
		mustReserve(t, s, fresh, opts("a"))

		list, err := a.InFlight(ctx, 500*time.Millisecond, 1000)
		if err != nil {
			t.Fatalf("InFlight = %v", err)
		}
		if !containsKey(list, stuck) || containsKey(list, fresh) || containsKey(list, done) {
			t.Errorf("InFlight(older than 500ms) = %d records; want the stuck key only (stuck %v, fresh %v, done %v)",
				len(list), containsKey(list, stuck), containsKey(list, fresh), containsKey(list, done))
		}
		if err := a.ForceRelease(ctx, done); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Errorf("ForceRelease(completed) = %v; want ErrLeaseLost", err)
		}
		if err := a.ForceRelease(ctx, NewTestKey(t)); !errors.Is(err, keystore.ErrNotFound) {
			t.Errorf("ForceRelease(unknown) = %v; want ErrNotFound", err)
		}
		want := &keystore.Response{Status: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(`{"ok":true}`)}
		if err := a.ForceComplete(ctx, stuck, want); err != nil {
			t.Fatalf("ForceComplete = %v", err)
		}
		if err := s.Complete(ctx, stuck, stuckRes.Token, sampleResponse()); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Errorf("holder's Complete after ForceComplete = %v; want ErrLeaseLost", err)
		}
		got := mustReserve(t, s, stuck, opts("a"))
		if got.Response == nil {
			t.Fatalf("Reserve after ForceComplete = %+v; want a replay", got)
		}
		assertResponse(t, got.Response, want)
		if err := a.ForceRelease(ctx, fresh); err != nil {
			t.Fatalf("ForceRelease = %v", err)
		}
		if got := mustReserve(t, s, fresh, opts("b")); got.Token == 0 {
			t.Errorf("Reserve after ForceRelease = %+v; want a new claim", got)
		}
	})
}

func isLost(err error) bool {
	return errors.Is(err, keystore.ErrLeaseLost) || errors.Is(err, keystore.ErrNotFound)
}

func containsKey(recs []keystore.Record, k keystore.Key) bool {
	for _, r := range recs {
		if r.Key == k {
			return true
		}
	}
	return false
}

// race runs fn in n goroutines released at once and counts the outcomes.
func race(t *testing.T, n int, fn func() error) (wins, inFlight, other int) {
	t.Helper()
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- fn()
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		switch {
		case err == nil:
			wins++
		case errors.Is(err, keystore.ErrInFlight):
			inFlight++
		default:
			t.Logf("racing call: %v", err)
			other++
		}
	}
	return wins, inFlight, other
}

func mustReserve(t *testing.T, s keystore.Store, k keystore.Key, o keystore.ReserveOptions) keystore.Reservation {
	t.Helper()
	res, err := s.Reserve(context.Background(), k, o)
	if err != nil {
		t.Fatalf("Reserve = %v", err)
	}
	return res
}

func assertResponse(t *testing.T, got, want *keystore.Response) {
	t.Helper()
	if got.Status != want.Status {
		t.Errorf("status = %d; want %d", got.Status, want.Status)
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Errorf("body = %d bytes %q; want %d bytes %q", len(got.Body), trim(got.Body), len(want.Body), trim(want.Body))
	}
	if len(got.Header) != len(want.Header) || (len(want.Header) > 0 && !reflect.DeepEqual(got.Header, want.Header)) {
		t.Errorf("header = %v; want %v", got.Header, want.Header)
	}
	if got.TooLarge != want.TooLarge {
		t.Errorf("TooLarge = %v; want %v", got.TooLarge, want.TooLarge)
	}
}

func trim(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

// Bench runs the benchmarks every backend shares: a first write
// (Reserve + Complete on a new key) and a replay (Reserve on a completed key,
// the cache hit on the hot path), both in parallel.
func Bench(b *testing.B, newStore func(b *testing.B) keystore.Store) {
	ctx := context.Background()
	resp := &keystore.Response{
		Status: 201,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   bytes.Repeat([]byte("x"), 512),
	}
	b.Run("ReserveComplete", func(b *testing.B) {
		s := newStore(b)
		var n atomic.Uint64
		base := fmt.Sprint(time.Now().UnixNano())
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				k := keystore.NewKey("bench", base, fmt.Sprint(n.Add(1)))
				res, err := s.Reserve(ctx, k, opts("a"))
				if err != nil {
					b.Error(err)
					return
				}
				if err := s.Complete(ctx, k, res.Token, resp); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("Replay", func(b *testing.B) {
		s := newStore(b)
		k := keystore.NewKey("bench-replay", fmt.Sprint(time.Now().UnixNano()))
		res, err := s.Reserve(ctx, k, opts("a"))
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, k, res.Token, resp); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r, err := s.Reserve(ctx, k, opts("a"))
				if err != nil || r.Response == nil {
					b.Errorf("replay: %+v, %v", r, err)
					return
				}
			}
		})
	})
}
