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

// A Case is one named test of the suite. Each runs, in parallel with the
// others, on a fresh store from the [Factory].
type Case struct {
	Name string
	Test func(t *testing.T, s keystore.Store, advance func(time.Duration))
}

// Cases lists the suite's tests in the order Run runs them.
var Cases = []Case{
	{"NotFound", testNotFound},
	{"ClaimThenInFlight", testClaimThenInFlight},
	{"KeysAreIndependent", testKeysAreIndependent},
	{"ReplayIsByteIdentical", testReplayIsByteIdentical},
	{"EmptyAndNilBodies", testEmptyAndNilBodies},
	{"MismatchDoesNotPoison", testMismatchDoesNotPoison},
	{"TooLarge", testTooLarge},
	{"ReleaseAllowsRetry", testReleaseAllowsRetry},
	{"TakeoverAfterLease", testTakeoverAfterLease},
	{"LateCompleteWithoutTakeover", testLateCompleteWithoutTakeover},
	{"RenewExtendsLease", testRenewExtendsLease},
	{"RetentionExpiry", testRetentionExpiry},
	{"ConcurrentReserveOneWinner", testConcurrentReserveOneWinner},
	{"ConcurrentTakeoverOneWinner", testConcurrentTakeoverOneWinner},
	{"ConcurrentCompleteAndTakeover", testConcurrentCompleteAndTakeover},
	{"CancelledContext", testCancelledContext},
	{"CloseIsIdempotent", testCloseIsIdempotent},
	{"Admin", testAdmin},
	{"ClaimIDs", testClaimIDs},
	{"CompleteClaimOwnRecord", testCompleteClaimOwnRecord},
	{"CompleteClaimFenced", testCompleteClaimFenced},
	{"CompleteClaimVanished", testCompleteClaimVanished},
	{"ReleaseClaimFreesKey", testReleaseClaimFreesKey},
	{"ReleaseClaimLeavesOthers", testReleaseClaimLeavesOthers},
	{"TombstonedLateClaim", testTombstonedLateClaim},
	{"FingerprintVersionRoundTrip", testFingerprintVersionRoundTrip},
	{"ConcurrentCompleteClaimAndTakeover", testConcurrentCompleteClaimAndTakeover},
	{"ReplayTTL", testReplayTTL},
	{"SentMarkThenLapsedHeld", testSentMarkThenLapsedHeld},
	{"LapsedWithoutSentMarkTakenOver", testLapsedWithoutSentMarkTakenOver},
	{"LapsedSentTakenOverWithoutHold", testLapsedSentTakenOverWithoutHold},
	{"MarkUnknownFenced", testMarkUnknownFenced},
	{"ResolveFirstWins", testResolveFirstWins},
	{"ResolveRelease", testResolveRelease},
	{"UnknownResolvedByHolder", testUnknownResolvedByHolder},
	{"ConcurrentLapsedHoldOneMark", testConcurrentLapsedHoldOneMark},
	{"ProbeLease", testProbeLease},
}

// Run runs every case of the suite against the stores f makes.
func Run(t *testing.T, f Factory) {
	t.Helper()
	for _, c := range Cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			s, advance := f(t)
			c.Test(t, s, advance)
		})
	}
}

func testNotFound(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
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
}

func testClaimThenInFlight(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
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
}

func testKeysAreIndependent(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	k1, k2 := NewTestKey(t), NewTestKey(t)
	mustReserve(t, s, k1, opts("a"))
	if res := mustReserve(t, s, k2, opts("a")); res.Token == 0 {
		t.Errorf("Reserve(k2) = %+v; want a claim", res)
	}
}

func testReplayIsByteIdentical(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
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
}

func testEmptyAndNilBodies(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
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
}

func testMismatchDoesNotPoison(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
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
}

func testTooLarge(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	k := NewTestKey(t)
	res := mustReserve(t, s, k, opts("a"))
	if err := s.Complete(ctx, k, res.Token, &keystore.Response{Status: 200, TooLarge: true}); err != nil {
		t.Fatalf("Complete = %v", err)
	}
	got := mustReserve(t, s, k, opts("a"))
	if got.Response == nil || !got.Response.TooLarge || got.Response.Status != 200 {
		t.Errorf("Reserve = %+v; want a too-large record with status 200", got)
	}
}

func testReleaseAllowsRetry(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
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
}

func testTakeoverAfterLease(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
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
}

func testLateCompleteWithoutTakeover(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	k := NewTestKey(t)
	res := mustReserve(t, s, k, opts("a"))
	advance(Lease + 100*time.Millisecond)
	if err := s.Complete(ctx, k, res.Token, sampleResponse()); err != nil {
		t.Fatalf("Complete after the lease, nobody took over = %v; want success", err)
	}
	if got := mustReserve(t, s, k, opts("a")); got.Response == nil {
		t.Errorf("Reserve = %+v; want a replay", got)
	}
}

func testRenewExtendsLease(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
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
}

func testRetentionExpiry(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
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
}

func testConcurrentReserveOneWinner(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	k := NewTestKey(t)
	wins, inFlight, other := race(t, 64, func() error {
		_, err := s.Reserve(ctx, k, opts("a"))
		return err
	})
	if wins != 1 || inFlight != 63 || other != 0 {
		t.Errorf("64 racing Reserves: %d wins, %d in flight, %d other; want 1, 63, 0", wins, inFlight, other)
	}
}

func testConcurrentTakeoverOneWinner(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
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
}

func testConcurrentCompleteAndTakeover(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
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
}

func testCancelledContext(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
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
}

func testCloseIsIdempotent(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	if err := s.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v; want nil", err)
	}
	if _, err := s.Reserve(ctx, NewTestKey(t), opts("a")); !errors.Is(err, keystore.ErrClosed) {
		t.Errorf("Reserve after Close = %v; want ErrClosed", err)
	}
}

func testAdmin(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
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
}

func claimOpts(fingerprint string, id keystore.ClaimID) keystore.ReserveOptions {
	o := opts(fingerprint)
	o.ClaimID = id
	return o
}

// A claim carries the caller's claim id, and the store reports it with
// everything needed to complete the claim.
func testClaimIDs(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	k := NewTestKey(t)
	id := keystore.NewClaimID()
	res := mustReserve(t, s, k, claimOpts("a", id))
	c := res.Claim
	if c.ID != id || c.Token != res.Token || c.Fingerprint != fp("a") || c.FingerprintVersion != keystore.FingerprintV1 || c.Route != "route_a" {
		t.Errorf("Claim = %+v; want id %s, token %d, fingerprint a in version 1, route_a", c, id, res.Token)
	}
	if got := c.Expires.Sub(c.Claimed); got != Retention {
		t.Errorf("Claim expires %v after it was made; want the retention %v", got, Retention)
	}
	rec, err := s.Get(ctx, k)
	if err != nil {
		t.Fatalf("Get = %v", err)
	}
	if rec.ClaimID != id || rec.FingerprintVersion != keystore.FingerprintV1 || !rec.Expires.Equal(c.Expires) {
		t.Errorf("Get = %+v; want claim id %s, version 1, expires %v", rec, id, c.Expires)
	}
	// Without a claim id the store draws one.
	res2 := mustReserve(t, s, NewTestKey(t), opts("a"))
	if res2.Claim.ID.IsZero() || res2.Claim.ID == id {
		t.Errorf("Reserve without a claim id: Claim.ID = %s; want a fresh non-zero id", res2.Claim.ID)
	}
	// A takeover carries the new claim's id.
	advance(Lease + 100*time.Millisecond)
	id2 := keystore.NewClaimID()
	nw := mustReserve(t, s, k, claimOpts("a", id2))
	if !nw.Takeover || nw.Claim.ID != id2 || nw.Claim.Token != nw.Token {
		t.Errorf("takeover = %+v; want a takeover with claim id %s", nw, id2)
	}
}

// Completing one's own claim succeeds, and so does completing it again (an
// earlier attempt whose reply was lost stored the answer): neither is a
// fence rejection.
func testCompleteClaimOwnRecord(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	k := NewTestKey(t)
	res := mustReserve(t, s, k, claimOpts("a", keystore.NewClaimID()))
	want := sampleResponse()
	for i := range 2 {
		how, err := s.CompleteClaim(ctx, k, res.Claim, want)
		if err != nil || how != keystore.Completed {
			t.Fatalf("CompleteClaim #%d = %v, %v; want completed", i, how, err)
		}
	}
	got := mustReserve(t, s, k, opts("a"))
	if got.Response == nil {
		t.Fatalf("Reserve after CompleteClaim = %+v; want a replay", got)
	}
	assertResponse(t, got.Response, want)
	// Even after the lease, nobody having taken over.
	k2 := NewTestKey(t)
	res2 := mustReserve(t, s, k2, claimOpts("a", keystore.NewClaimID()))
	advance(Lease + 100*time.Millisecond)
	if how, err := s.CompleteClaim(ctx, k2, res2.Claim, want); err != nil || how != keystore.Completed {
		t.Errorf("CompleteClaim after the lease, no takeover = %v, %v; want completed", how, err)
	}
}

// A completion is rejected with ErrLeaseLost when another claim holds the
// key, or when the claim was released or repaired by an operator.
func testCompleteClaimFenced(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	fenced := func(name string, k keystore.Key, c keystore.Claim) {
		t.Helper()
		how, err := s.CompleteClaim(ctx, k, c, &keystore.Response{Status: 299})
		if !errors.Is(err, keystore.ErrLeaseLost) || errors.Is(err, keystore.ErrNotFound) {
			t.Errorf("%s: CompleteClaim = %v, %v; want ErrLeaseLost", name, how, err)
		}
	}
	// Taken over.
	k := NewTestKey(t)
	old := mustReserve(t, s, k, claimOpts("a", keystore.NewClaimID()))
	advance(Lease + 100*time.Millisecond)
	nw := mustReserve(t, s, k, claimOpts("a", keystore.NewClaimID()))
	fenced("after a takeover", k, old.Claim)
	if how, err := s.CompleteClaim(ctx, k, nw.Claim, sampleResponse()); err != nil || how != keystore.Completed {
		t.Fatalf("CompleteClaim by the new holder = %v, %v", how, err)
	}
	fenced("after the new holder completed", k, old.Claim)
	got := mustReserve(t, s, k, opts("a"))
	if got.Response == nil {
		t.Fatalf("Reserve = %+v; want the new holder's replay", got)
	}
	assertResponse(t, got.Response, sampleResponse())

	// Released by its holder.
	k = NewTestKey(t)
	res := mustReserve(t, s, k, claimOpts("a", keystore.NewClaimID()))
	if err := s.Release(ctx, k, res.Token); err != nil {
		t.Fatal(err)
	}
	fenced("after Release", k, res.Claim)

	// The same claim id with another token is another claim.
	k = NewTestKey(t)
	res = mustReserve(t, s, k, claimOpts("a", keystore.NewClaimID()))
	c := res.Claim
	c.Token++
	fenced("with another token", k, c)

	a, ok := s.(keystore.Admin)
	if !ok {
		return
	}
	k = NewTestKey(t)
	res = mustReserve(t, s, k, claimOpts("a", keystore.NewClaimID()))
	if err := a.ForceComplete(ctx, k, &keystore.Response{Status: 200}); err != nil {
		t.Fatal(err)
	}
	fenced("after ForceComplete", k, res.Claim)
	k = NewTestKey(t)
	res = mustReserve(t, s, k, claimOpts("a", keystore.NewClaimID()))
	if err := a.ForceRelease(ctx, k); err != nil {
		t.Fatal(err)
	}
	fenced("after ForceRelease", k, res.Claim)
}

// A claim whose record vanished (the store lost it) completes by creating
// the record, completed, living until the claim's Expires; past it, nothing
// is stored. The suite cannot make a backend lose a record, so it completes
// the claim under a key that has none: to the store, the two are the same.
func testCompleteClaimVanished(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	res := mustReserve(t, s, NewTestKey(t), claimOpts("a", keystore.NewClaimID()))
	c := res.Claim
	k := NewTestKey(t) // no record
	want := sampleResponse()
	how, err := s.CompleteClaim(ctx, k, c, want)
	if err != nil || how != keystore.Recreated {
		t.Fatalf("CompleteClaim on a vanished record = %v, %v; want recreated", how, err)
	}
	rec, err := s.Get(ctx, k)
	if err != nil {
		t.Fatalf("Get = %v", err)
	}
	if rec.State != keystore.StateCompleted || rec.ClaimID != c.ID || rec.Token != c.Token || rec.Fingerprint != c.Fingerprint ||
		rec.FingerprintVersion != c.FingerprintVersion || rec.Route != c.Route || !rec.Expires.Equal(c.Expires) {
		t.Errorf("Get = %+v; want completed with the claim's id, token, fingerprint, version, route and expiry (%+v)", rec, c)
	}
	if rec.Response == nil {
		t.Fatalf("Get: no response")
	}
	assertResponse(t, rec.Response, want)
	if again, err := s.CompleteClaim(ctx, k, c, want); err != nil || again != keystore.Completed {
		t.Errorf("CompleteClaim again = %v, %v; want completed (already)", again, err)
	}
	got := mustReserve(t, s, k, opts("a"))
	if got.Response == nil {
		t.Fatalf("Reserve after the vanished completion = %+v; want a replay", got)
	}
	assertResponse(t, got.Response, want)
	if _, err := s.Reserve(ctx, k, opts("b")); !errors.Is(err, keystore.ErrFingerprintMismatch) {
		t.Errorf("Reserve(other fingerprint) = %v; want ErrFingerprintMismatch", err)
	}

	// The recreated record expires with the claim's retention.
	advance(Retention + 100*time.Millisecond)
	if _, err := s.Get(ctx, k); !errors.Is(err, keystore.ErrNotFound) {
		t.Errorf("Get after the claim's retention = %v; want ErrNotFound", err)
	}
	// Past Expires there is nothing to keep the answer for.
	k2 := NewTestKey(t)
	if how, err := s.CompleteClaim(ctx, k2, c, want); err != nil || how != keystore.Expired {
		t.Errorf("CompleteClaim past the claim's retention = %v, %v; want expired", how, err)
	}
	if _, err := s.Get(ctx, k2); !errors.Is(err, keystore.ErrNotFound) {
		t.Errorf("Get after an expired completion = %v; want ErrNotFound", err)
	}
}

// ReleaseClaim frees a key held by a claim whose reply was lost: the next
// request claims it at once, and the released claim's completion is fenced.
func testReleaseClaimFreesKey(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	k := NewTestKey(t)
	id := keystore.NewClaimID()
	res := mustReserve(t, s, k, claimOpts("a", id))
	for i := range 2 { // safe to repeat
		if err := s.ReleaseClaim(ctx, k, id, Lease); err != nil {
			t.Fatalf("ReleaseClaim #%d = %v", i, err)
		}
	}
	if rec, err := s.Get(ctx, k); err == nil && rec.State != keystore.StateReleased {
		t.Errorf("Get after ReleaseClaim = %+v; want ErrNotFound or released", rec)
	} else if err != nil && !errors.Is(err, keystore.ErrNotFound) {
		t.Errorf("Get after ReleaseClaim = %v; want ErrNotFound or released", err)
	}
	nw := mustReserve(t, s, k, claimOpts("b", keystore.NewClaimID()))
	if nw.Token == 0 || nw.Token == res.Token || nw.Takeover {
		t.Fatalf("Reserve after ReleaseClaim = %+v; want a new claim", nw)
	}
	if how, err := s.CompleteClaim(ctx, k, res.Claim, sampleResponse()); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Errorf("the released claim's CompleteClaim = %v, %v; want ErrLeaseLost", how, err)
	}
	if how, err := s.CompleteClaim(ctx, k, nw.Claim, sampleResponse()); err != nil || how != keystore.Completed {
		t.Errorf("the new claim's CompleteClaim = %v, %v; want completed", how, err)
	}
}

// ReleaseClaim leaves a record of another claim, or a completed one, alone.
func testReleaseClaimLeavesOthers(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	k := NewTestKey(t)
	res := mustReserve(t, s, k, claimOpts("a", keystore.NewClaimID()))
	if err := s.ReleaseClaim(ctx, k, keystore.NewClaimID(), Lease); err != nil {
		t.Fatalf("ReleaseClaim(other id) = %v", err)
	}
	if _, err := s.Reserve(ctx, k, opts("a")); !errors.Is(err, keystore.ErrInFlight) {
		t.Errorf("Reserve after another id's release = %v; want ErrInFlight (the claim holds)", err)
	}
	if how, err := s.CompleteClaim(ctx, k, res.Claim, sampleResponse()); err != nil || how != keystore.Completed {
		t.Fatalf("CompleteClaim = %v, %v; want completed", how, err)
	}
	// A completed claim ran: releasing its id keeps the answer.
	if err := s.ReleaseClaim(ctx, k, res.Claim.ID, Lease); err != nil {
		t.Fatalf("ReleaseClaim(completed claim) = %v", err)
	}
	got := mustReserve(t, s, k, opts("a"))
	if got.Response == nil {
		t.Fatalf("Reserve = %+v; want a replay", got)
	}
	assertResponse(t, got.Response, sampleResponse())
}

// A claim that reaches the store after its id was released (the store ran
// the old connection's claim after the new connection's release) claims
// nothing, for a lease; other claims are not affected.
func testTombstonedLateClaim(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	k, k2 := NewTestKey(t), NewTestKey(t)
	id := keystore.NewClaimID()
	for _, key := range []keystore.Key{k, k2} {
		if err := s.ReleaseClaim(ctx, key, id, Lease); err != nil {
			t.Fatalf("ReleaseClaim before the claim = %v", err)
		}
	}
	if res, err := s.Reserve(ctx, k, claimOpts("a", id)); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Fatalf("late claim with a released id = %+v, %v; want ErrLeaseLost", res, err)
	}
	if rec, err := s.Get(ctx, k); err == nil && rec.State != keystore.StateReleased {
		t.Errorf("Get after the late claim = %+v; want ErrNotFound or released", rec)
	} else if err != nil && !errors.Is(err, keystore.ErrNotFound) {
		t.Errorf("Get after the late claim = %v; want ErrNotFound or released", err)
	}
	nw := mustReserve(t, s, k, claimOpts("a", keystore.NewClaimID()))
	if nw.Token == 0 {
		t.Fatalf("Reserve with a fresh id = %+v; want a claim", nw)
	}
	// The new claim keeps the tombstone: the late claim still claims nothing.
	if err := s.Release(ctx, k, nw.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, k, claimOpts("a", id)); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Errorf("late claim after another claim came and went = %v; want ErrLeaseLost", err)
	}
	// The tombstone lives one lease.
	advance(Lease / 2)
	if _, err := s.Reserve(ctx, k2, claimOpts("a", id)); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Errorf("late claim within the lease = %v; want ErrLeaseLost", err)
	}
	advance(Lease/2 + 100*time.Millisecond)
	if res, err := s.Reserve(ctx, k2, claimOpts("a", id)); err != nil || res.Token == 0 {
		t.Errorf("claim after the tombstone ended = %+v, %v; want a claim", res, err)
	}
}

// A record keeps the fingerprint version it was written with; a request is
// compared with it only in that version.
func testFingerprintVersionRoundTrip(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	v2 := func(fingerprint string) keystore.ReserveOptions {
		o := claimOpts(fingerprint, keystore.NewClaimID())
		o.FingerprintVersion = 2
		return o
	}
	k := NewTestKey(t)
	res := mustReserve(t, s, k, v2("a"))
	if res.FingerprintVersion != 2 || res.Claim.FingerprintVersion != 2 {
		t.Errorf("Reserve in version 2 = %+v; want version 2", res)
	}
	if rec, err := s.Get(ctx, k); err != nil || rec.FingerprintVersion != 2 {
		t.Errorf("Get = %+v, %v; want fingerprint version 2", rec, err)
	}
	var me *keystore.MismatchError
	// Same bytes, other version: not the same request; the error names the
	// record's version.
	if _, err := s.Reserve(ctx, k, opts("a")); !errors.As(err, &me) || me.Version != 2 || !errors.Is(err, keystore.ErrFingerprintMismatch) {
		t.Errorf("Reserve in version 1 = %v; want a MismatchError naming version 2", err)
	}
	if _, err := s.Reserve(ctx, k, v2("a")); !errors.Is(err, keystore.ErrInFlight) {
		t.Errorf("Reserve in version 2 = %v; want ErrInFlight", err)
	}
	if _, err := s.Reserve(ctx, k, v2("b")); !errors.As(err, &me) || me.Version != 2 {
		t.Errorf("Reserve(other fingerprint) in version 2 = %v; want a MismatchError naming version 2", err)
	}
	if _, err := s.CompleteClaim(ctx, k, res.Claim, sampleResponse()); err != nil {
		t.Fatal(err)
	}
	got := mustReserve(t, s, k, v2("a"))
	if got.Response == nil || got.FingerprintVersion != 2 {
		t.Errorf("replay in version 2 = %+v; want a replay of a version 2 record", got)
	}
	if _, err := s.Reserve(ctx, k, opts("a")); !errors.As(err, &me) || me.Version != 2 {
		t.Errorf("Reserve of the completed record in version 1 = %v; want a MismatchError naming version 2", err)
	}
	// A zero version is version 1, the first release's.
	k1 := NewTestKey(t)
	r1 := mustReserve(t, s, k1, opts("a"))
	if r1.FingerprintVersion != keystore.FingerprintV1 {
		t.Errorf("Reserve with a zero version = %+v; want version 1", r1)
	}
	o := opts("a")
	o.FingerprintVersion = keystore.FingerprintV1
	if _, err := s.Reserve(ctx, k1, o); !errors.Is(err, keystore.ErrInFlight) {
		t.Errorf("Reserve in version 1 explicitly = %v; want ErrInFlight", err)
	}
	if _, err := s.Reserve(ctx, k1, v2("a")); !errors.As(err, &me) || me.Version != keystore.FingerprintV1 {
		t.Errorf("Reserve in version 2 of a version 1 record = %v; want a MismatchError naming version 1", err)
	}
}

// A late CompleteClaim racing a takeover: either it completes first (and
// the takeover is a replay), or the takeover wins (and it is fenced).
func testConcurrentCompleteClaimAndTakeover(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	for range 20 {
		k := NewTestKey(t)
		old := mustReserve(t, s, k, claimOpts("a", keystore.NewClaimID()))
		advance(Lease + 100*time.Millisecond)
		var completeErr, reserveErr error
		var how keystore.Completion
		var res keystore.Reservation
		var wg sync.WaitGroup
		wg.Go(func() { how, completeErr = s.CompleteClaim(ctx, k, old.Claim, sampleResponse()) })
		wg.Go(func() { res, reserveErr = s.Reserve(ctx, k, claimOpts("a", keystore.NewClaimID())) })
		wg.Wait()
		switch {
		case completeErr == nil && how == keystore.Completed && reserveErr == nil && res.Response != nil:
		case errors.Is(completeErr, keystore.ErrLeaseLost) && reserveErr == nil && res.Takeover:
		default:
			t.Fatalf("CompleteClaim = %v, %v; Reserve = %+v, %v; want complete-then-replay or takeover-then-fenced", how, completeErr, res, reserveErr)
		}
	}
}

// A replay's TTL, when the backend reports one, is what is left of the
// record's retention: never more, and less as time passes.
func testReplayTTL(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	k := NewTestKey(t)
	res := mustReserve(t, s, k, opts("a"))
	if err := s.Complete(ctx, k, res.Token, sampleResponse()); err != nil {
		t.Fatal(err)
	}
	first := mustReserve(t, s, k, opts("a"))
	if first.Response == nil {
		t.Fatalf("Reserve of a completed key = %+v; want a replay", first)
	}
	if first.TTL == 0 {
		t.Skip("the backend reports no TTL")
	}
	if first.TTL < 0 || first.TTL > Retention {
		t.Fatalf("replay TTL = %v; want in (0, %v]", first.TTL, Retention)
	}
	advance(Lease)
	second := mustReserve(t, s, k, opts("a"))
	if second.Response == nil || second.TTL <= 0 || second.TTL > Retention-Lease {
		t.Errorf("replay after %v: TTL %v (replay %v); want in (0, %v]", Lease, second.TTL, second.Response != nil, Retention-Lease)
	}
	if res.Claim.Expires.IsZero() {
		return
	}
	if rec, err := s.Get(ctx, k); err == nil && !rec.Expires.IsZero() && second.TTL > rec.Expires.Sub(res.Claim.Claimed) {
		t.Errorf("replay TTL %v is more than the record's whole retention %v", second.TTL, rec.Expires.Sub(res.Claim.Claimed))
	}
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
// (Reserve + Complete, or + CompleteClaim, on a new key) and a replay (Reserve on a completed key,
// the cache hit on the hot path), both in parallel. Each reports cpu-ns/op:
// this process's CPU time per operation (a Redis server's is not counted),
// which a loaded machine disturbs less than ns/op.
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
		cpu := processCPU()
		defer reportCPU(b, cpu)
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
	b.Run("ReserveCompleteClaim", func(b *testing.B) {
		s := newStore(b)
		var n atomic.Uint64
		base := fmt.Sprint(time.Now().UnixNano())
		b.ReportAllocs()
		cpu := processCPU()
		defer reportCPU(b, cpu)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				k := keystore.NewKey("bench-claim", base, fmt.Sprint(n.Add(1)))
				o := opts("a")
				o.ClaimID = keystore.NewClaimID()
				res, err := s.Reserve(ctx, k, o)
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := s.CompleteClaim(ctx, k, res.Claim, resp); err != nil {
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
		cpu := processCPU()
		defer reportCPU(b, cpu)
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

// reportCPU reports the process CPU time since cpu per operation.
func reportCPU(b *testing.B, cpu time.Duration) {
	if cpu > 0 && b.N > 0 {
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	}
}

// ProcessCPU returns the user and system CPU time the process has used
// (zero where the platform cannot tell), for benchmarks that report CPU
// per operation with [ReportCPU]: on a loaded machine it is steadier than
// the wall time.
func ProcessCPU() time.Duration { return processCPU() }

// ReportCPU reports the process CPU time since start (from [ProcessCPU])
// per operation, as cpu-ns/op.
func ReportCPU(b *testing.B, start time.Duration) { reportCPU(b, start) }

func unknowns(t *testing.T, s keystore.Store) keystore.UnknownStore {
	t.Helper()
	us, ok := s.(keystore.UnknownStore)
	if !ok {
		t.Fatalf("%T does not implement keystore.UnknownStore", s)
	}
	return us
}

func holdOpts(fingerprint string) keystore.ReserveOptions {
	o := opts(fingerprint)
	o.Hold = true
	return o
}

// sentClaim claims k and writes its sent mark.
func sentClaim(t *testing.T, s keystore.Store, k keystore.Key) keystore.Reservation {
	t.Helper()
	res := mustReserve(t, s, k, holdOpts("a"))
	if err := unknowns(t, s).MarkSent(t.Context(), k, res.Token, keystore.UnknownInfo("POST", "/pay?x=1", "key-1", "req-1")); err != nil {
		t.Fatalf("MarkSent = %v", err)
	}
	return res
}

// isUnknown reports whether err is ErrOutcomeUnknown, and whether the call
// marked the record.
func isUnknown(err error) (unknown, marked bool) {
	var ue *keystore.UnknownError
	if errors.As(err, &ue) {
		return true, ue.Marked
	}
	return errors.Is(err, keystore.ErrOutcomeUnknown), false
}

// A lapsed claim with the sent mark is marked unknown by a Reserve with
// Hold (once: later ones see it unknown), keeps its claim id and info, and
// then answers ErrOutcomeUnknown to every Reserve, Hold or not; renewals by
// its old holder fail.
func testSentMarkThenLapsedHeld(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	k := NewTestKey(t)
	res := sentClaim(t, s, k)
	rec, err := s.Get(ctx, k)
	if err != nil || rec.State != keystore.StateInFlight || !rec.Sent {
		t.Fatalf("Get after MarkSent = %+v, %v; want in flight with the sent mark", rec, err)
	}
	if _, err := s.Reserve(ctx, k, holdOpts("a")); !errors.Is(err, keystore.ErrInFlight) {
		t.Fatalf("Reserve within the lease = %v; want ErrInFlight", err)
	}
	advance(Lease + 100*time.Millisecond)
	_, err = s.Reserve(ctx, k, holdOpts("a"))
	if u, marked := isUnknown(err); !u || !marked {
		t.Fatalf("Reserve(Hold) of a lapsed sent claim = %v; want an UnknownError that marked it", err)
	}
	var ue *keystore.UnknownError
	if errors.As(err, &ue) && (ue.Info == nil || ue.Info.Header.Get(keystore.InfoRequestID) != "req-1") {
		t.Errorf("UnknownError.Info = %+v; want the sent mark's info", ue.Info)
	}
	for _, o := range []keystore.ReserveOptions{holdOpts("a"), opts("a")} {
		_, err := s.Reserve(ctx, k, o)
		if u, marked := isUnknown(err); !u || marked {
			t.Errorf("Reserve(Hold %v) of an unknown record = %v; want ErrOutcomeUnknown, not marked again", o.Hold, err)
		}
	}
	if _, err := s.Reserve(ctx, k, holdOpts("b")); !errors.Is(err, keystore.ErrFingerprintMismatch) {
		t.Errorf("Reserve(other fingerprint) of an unknown record = %v; want ErrFingerprintMismatch", err)
	}
	if _, err := s.Renew(ctx, k, res.Token, Lease); !isLost(err) {
		t.Errorf("Renew of an unknown record = %v; want ErrLeaseLost", err)
	}
	rec, err = s.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != keystore.StateUnknown || rec.Cause != keystore.CauseLapsed || rec.ClaimID != res.Claim.ID {
		t.Errorf("Get = state %v cause %v claim %v; want unknown, lapsed, claim %v", rec.State, rec.Cause, rec.ClaimID, res.Claim.ID)
	}
	if rec.Info == nil || rec.Info.Header.Get(keystore.InfoPath) != "/pay?x=1" || rec.Info.Header.Get(keystore.InfoKey) != "key-1" {
		t.Errorf("Get.Info = %+v; want the sent mark's info", rec.Info)
	}
	list, err := unknowns(t, s).Unknown(ctx, 0)
	if err != nil || !containsKey(list, k) {
		t.Errorf("Unknown = %d records, %v; want the record listed", len(list), err)
	}
	if a, ok := s.(keystore.Admin); ok {
		if err := a.ForceRelease(ctx, k); !errors.Is(err, keystore.ErrLeaseLost) {
			t.Errorf("ForceRelease of an unknown record = %v; want ErrLeaseLost (Resolve is fenced by the claim id)", err)
		}
	}
}

// A lapsed claim without the sent mark never reached the upstream: it is
// taken over, Hold or not.
func testLapsedWithoutSentMarkTakenOver(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	k := NewTestKey(t)
	old := mustReserve(t, s, k, holdOpts("a"))
	advance(Lease + 100*time.Millisecond)
	nw := mustReserve(t, s, k, holdOpts("a"))
	if !nw.Takeover || nw.Token <= old.Token {
		t.Fatalf("Reserve(Hold) of a lapsed unsent claim = %+v; want a takeover", nw)
	}
	rec, err := s.Get(t.Context(), k)
	if err != nil || rec.Sent || rec.State != keystore.StateInFlight {
		t.Errorf("Get after the takeover = %+v, %v; want in flight without the old claim's sent mark", rec, err)
	}
}

// Without Hold (unknown_outcome: takeover) a lapsed sent claim is taken
// over as before.
func testLapsedSentTakenOverWithoutHold(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	k := NewTestKey(t)
	old := sentClaim(t, s, k)
	advance(Lease + 100*time.Millisecond)
	nw := mustReserve(t, s, k, opts("a"))
	if !nw.Takeover || nw.Token <= old.Token {
		t.Fatalf("Reserve of a lapsed sent claim without Hold = %+v; want a takeover", nw)
	}
	// The new claim has not been sent: after its lease, Hold takes it over.
	advance(Lease + 100*time.Millisecond)
	if res := mustReserve(t, s, k, holdOpts("a")); !res.Takeover {
		t.Errorf("Reserve(Hold) after the new claim lapsed = %+v; want a takeover (its sent mark is not the old one's)", res)
	}
}

// MarkUnknown is fenced by the token, and MarkSent after it fails.
func testMarkUnknownFenced(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	us := unknowns(t, s)
	k := NewTestKey(t)
	res := sentClaim(t, s, k)
	if err := us.MarkUnknown(ctx, k, res.Token+1, keystore.CauseBroken); !isLost(err) {
		t.Errorf("MarkUnknown with another token = %v; want ErrLeaseLost", err)
	}
	if err := us.MarkUnknown(ctx, k, res.Token, keystore.CauseBroken); err != nil {
		t.Fatalf("MarkUnknown = %v", err)
	}
	rec, err := s.Get(ctx, k)
	if err != nil || rec.State != keystore.StateUnknown || rec.Cause != keystore.CauseBroken {
		t.Fatalf("Get = %+v, %v; want unknown, cause broken", rec, err)
	}
	if err := us.MarkSent(ctx, k, res.Token, nil); !isLost(err) {
		t.Errorf("MarkSent on an unknown record = %v; want ErrLeaseLost", err)
	}
	if err := us.MarkUnknown(ctx, NewTestKey(t), 1, keystore.CauseBroken); !errors.Is(err, keystore.ErrNotFound) {
		t.Errorf("MarkUnknown of no record = %v; want ErrNotFound", err)
	}
	// A record never sent can be marked by its holder too (the late wait
	// ended before the request was written is not one, but the store
	// does not judge).
	advance(Lease + 100*time.Millisecond)
	if u, _ := isUnknown(func() error { _, err := s.Reserve(ctx, k, opts("a")); return err }()); !u {
		t.Errorf("Reserve of an unknown record after its lease = not unknown; want ErrOutcomeUnknown")
	}
}

// The first resolution wins, fenced by the claim id: a complete, then a
// release or a complete by the same id, or any by another id, fail.
func testResolveFirstWins(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	us := unknowns(t, s)
	k := NewTestKey(t)
	res := sentClaim(t, s, k)
	if err := us.Resolve(ctx, k, res.Claim.ID, sampleResponse()); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Errorf("Resolve of an in-flight record = %v; want ErrLeaseLost", err)
	}
	if err := us.MarkUnknown(ctx, k, res.Token, keystore.CauseLateTimeout); err != nil {
		t.Fatal(err)
	}
	if err := us.Resolve(ctx, k, keystore.NewClaimID(), sampleResponse()); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Errorf("Resolve with another claim id = %v; want ErrLeaseLost", err)
	}
	want := sampleResponse()
	if err := us.Resolve(ctx, k, res.Claim.ID, want); err != nil {
		t.Fatalf("Resolve = %v", err)
	}
	if err := us.Resolve(ctx, k, res.Claim.ID, nil); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Errorf("second Resolve (release) = %v; want ErrLeaseLost", err)
	}
	if _, err := s.CompleteClaim(ctx, k, res.Claim, &keystore.Response{Status: 299}); !errors.Is(err, keystore.ErrLeaseLost) && err != nil {
		t.Errorf("the holder's late completion after a resolution = %v", err)
	}
	got := mustReserve(t, s, k, holdOpts("a"))
	if got.Response == nil {
		t.Fatalf("Reserve after Resolve = %+v; want a replay", got)
	}
	assertResponse(t, got.Response, want)
	if err := us.Resolve(ctx, NewTestKey(t), res.Claim.ID, nil); !errors.Is(err, keystore.ErrNotFound) {
		t.Errorf("Resolve of no record = %v; want ErrNotFound", err)
	}
}

// Resolve with nil releases the key: the next Reserve claims it anew.
func testResolveRelease(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	us := unknowns(t, s)
	k := NewTestKey(t)
	res := sentClaim(t, s, k)
	if err := us.MarkUnknown(ctx, k, res.Token, keystore.CauseShutdown); err != nil {
		t.Fatal(err)
	}
	if err := us.Resolve(ctx, k, res.Claim.ID, nil); err != nil {
		t.Fatalf("Resolve(release) = %v", err)
	}
	nw := mustReserve(t, s, k, holdOpts("a"))
	if nw.Response != nil || nw.Token <= res.Token {
		t.Fatalf("Reserve after a release = %+v; want a new claim", nw)
	}
	if err := us.Resolve(ctx, k, res.Claim.ID, sampleResponse()); !errors.Is(err, keystore.ErrLeaseLost) {
		t.Errorf("Resolve of the old claim after the new claim = %v; want ErrLeaseLost", err)
	}
	list, err := us.Unknown(ctx, 0)
	if err != nil || containsKey(list, k) {
		t.Errorf("Unknown after the release = %v; want the record gone from the list", err)
	}
}

// The holder's own late completion (by claim id) resolves its unknown
// record, as does its release by token.
func testUnknownResolvedByHolder(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	ctx := t.Context()
	us := unknowns(t, s)
	k := NewTestKey(t)
	res := sentClaim(t, s, k)
	advance(Lease + 100*time.Millisecond)
	if _, err := s.Reserve(ctx, k, holdOpts("a")); !errors.Is(err, keystore.ErrOutcomeUnknown) {
		t.Fatalf("Reserve(Hold) = %v; want ErrOutcomeUnknown", err)
	}
	want := sampleResponse()
	how, err := s.CompleteClaim(ctx, k, res.Claim, want)
	if err != nil || how != keystore.Completed {
		t.Fatalf("CompleteClaim by the unknown record's own claim = %v, %v; want Completed", how, err)
	}
	got := mustReserve(t, s, k, holdOpts("a"))
	if got.Response == nil {
		t.Fatalf("Reserve = %+v; want a replay", got)
	}
	assertResponse(t, got.Response, want)

	k2 := NewTestKey(t)
	res2 := sentClaim(t, s, k2)
	if err := us.MarkUnknown(ctx, k2, res2.Token, keystore.CauseBroken); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, k2, res2.Token); err != nil {
		t.Fatalf("Release by the unknown record's own token = %v", err)
	}
	if nw := mustReserve(t, s, k2, holdOpts("a")); nw.Token == 0 {
		t.Errorf("Reserve after the release = %+v; want a claim", nw)
	}
}

// N retries racing on a lapsed sent claim with Hold: exactly one marks it
// unknown, the others see it unknown; none claims.
func testConcurrentLapsedHoldOneMark(t *testing.T, s keystore.Store, advance func(time.Duration)) {
	k := NewTestKey(t)
	sentClaim(t, s, k)
	advance(Lease + 100*time.Millisecond)
	const n = 32
	var marked, seen, other atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := s.Reserve(context.Background(), k, holdOpts("a"))
			switch u, m := isUnknown(err); {
			case m:
				marked.Add(1)
			case u:
				seen.Add(1)
			default:
				t.Logf("racing Reserve: %v", err)
				other.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	if marked.Load() != 1 || seen.Load() != n-1 || other.Load() != 0 {
		t.Errorf("marked %d, saw unknown %d, other %d; want 1, %d, 0", marked.Load(), seen.Load(), other.Load(), n-1)
	}
}
