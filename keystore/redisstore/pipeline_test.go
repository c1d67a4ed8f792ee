package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/storetest"
)

// The conformance suite again with Options.DirectCalls (every call its own
// round trip, store.redis.auto_pipeline: false); TestConformance runs the
// default, pipelined, on every topology.
func TestConformanceDirectCalls(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	prefix := redistest.Prefix(t)
	storetest.Run(t, func(t *testing.T) (keystore.Store, func(time.Duration)) {
		s, err := New(c, Options{KeyPrefix: prefix, DirectCalls: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if s.pipe != nil {
			t.Fatal("DirectCalls store has a pipeliner")
		}
		return s, s.advance
	})
}

// Many concurrent keyed writes share pipelines; each gets its own answers
// back, never another call's, and a race for one key still has one winner.
func TestPipelinedCallsKeepTheirReplies(t *testing.T) {
	t.Parallel()
	s := newStore(t, newClient(t, redistest.Standalone), redistest.Prefix(t))
	if s.pipe == nil {
		t.Fatal("a default store has no pipeliner")
	}
	ctx := t.Context()
	const writers, each = 64, 20
	contested := storetest.NewTestKey(t)
	var wins sync.Map
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				k := keystore.NewKey(t.Name(), fmt.Sprint(w, "/", i))
				body := fmt.Sprintf(`{"writer":%d,"write":%d}`, w, i)
				res, err := s.Reserve(ctx, k, claimOpts(body, keystore.NewClaimID()))
				if err != nil || res.Response != nil {
					errs <- fmt.Errorf("writer %d, write %d: Reserve = %+v, %v; want a claim", w, i, res, err)
					return
				}
				if _, err := s.CompleteClaim(ctx, k, res.Claim, &keystore.Response{Status: 201, Body: []byte(body)}); err != nil {
					errs <- fmt.Errorf("writer %d, write %d: CompleteClaim = %v", w, i, err)
					return
				}
				rep, err := s.Reserve(ctx, k, claimOpts(body, keystore.NewClaimID()))
				if err != nil || rep.Response == nil || string(rep.Response.Body) != body {
					errs <- fmt.Errorf("writer %d, write %d: replay = %+v, %v; want %s", w, i, rep.Response, err, body)
					return
				}
			}
			if res, err := s.Reserve(ctx, contested, claimOpts("contested", keystore.NewClaimID())); err == nil {
				wins.Store(w, res.Claim)
			} else if !errors.Is(err, keystore.ErrInFlight) {
				errs <- fmt.Errorf("writer %d: contested Reserve = %v; want a claim or ErrInFlight", w, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n := 0
	wins.Range(func(any, any) bool { n++; return true })
	if n != 1 {
		t.Errorf("%d writers claimed the contested key; want 1", n)
	}
	st := s.PipelineStats()
	t.Logf("%d of %d calls went in %d pipelines", st.Calls, writers*(3*each+1), st.Batches)
	if st.Batches == 0 || st.Calls < 2*st.Batches {
		t.Errorf("pipeline stats %+v: want calls shared pipelines under %d concurrent writers", st, writers)
	}
}

// Redis hangs (SIGSTOP) under many concurrent calls: each pipelined call
// gives up after the client's read timeout, as a call of its own does,
// however many batches queue ahead of it; and a call whose own deadline is
// shorter gives up at that deadline.
func TestPipelinedCallsBoundedWhenRedisHangs(t *testing.T) {
	t.Parallel()
	own := startOwnRedis(t)
	const timeout = 300 * time.Millisecond
	s := newStore(t, own.client(t, timeout), redistest.Prefix(t))
	if _, err := s.Reserve(t.Context(), storetest.NewTestKey(t), reserveOpts("warm")); err != nil {
		t.Fatal(err)
	}
	own.Signal(syscall.SIGSTOP)
	defer own.Signal(syscall.SIGCONT)
	const calls = 200
	took := make(chan time.Duration, calls)
	errs := make(chan error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			ctx := t.Context()
			if i%2 == 1 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
			}
			start := time.Now()
			_, err := s.Reserve(ctx, keystore.NewKey(t.Name(), fmt.Sprint(i)), reserveOpts("a"))
			d := time.Since(start)
			took <- d
			switch {
			case err == nil:
				errs <- fmt.Errorf("call %d succeeded against a stopped Redis", i)
			case i%2 == 1 && !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err):
				errs <- fmt.Errorf("call %d with a 50ms deadline = %v; want the deadline (or a timeout, the call sent alone)", i, err)
			case i%2 == 0 && !isTimeout(err):
				errs <- fmt.Errorf("call %d = %v; want a timeout", i, err)
			case i%2 == 1 && d > timeout:
				errs <- fmt.Errorf("call %d with a 50ms deadline took %v", i, d)
			}
		})
	}
	wg.Wait()
	close(took)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var longest time.Duration
	for d := range took {
		longest = max(longest, d)
	}
	// One read timeout, and room for a loaded machine; unbounded, the
	// calls behind the first batch would wait for it and then their own.
	if longest > 2*timeout {
		t.Errorf("the slowest of %d calls took %v; want at most about the read timeout (%v)", calls, longest, timeout)
	}
	t.Logf("slowest call: %v", longest.Round(time.Millisecond))
}

// A queued call that stops waiting while its pipeline is on the wire may
// still run: its arguments must stay intact, never reused by a later call
// (the race detector watches the pooled call; the records show what was
// sent). A queued call that gives up before its pipeline goes is not sent.
func TestAbandonedCallsKeepTheirArguments(t *testing.T) {
	t.Parallel()
	own := startOwnRedis(t)
	s := newStore(t, own.client(t, 5*time.Second), redistest.Prefix(t))
	ctx := t.Context()
	if _, err := s.Reserve(ctx, storetest.NewTestKey(t), reserveOpts("warm")); err != nil {
		t.Fatal(err)
	}
	key := func(kind string, i int) keystore.Key { return keystore.NewKey(t.Name(), kind, fmt.Sprint(i)) }
	fp := func(kind string, i int) keystore.ReserveOptions { return reserveOpts(fmt.Sprint(kind, "-", i)) }
	reserve := func(d time.Duration, kind string, i int) error {
		dctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		_, err := s.Reserve(dctx, key(kind, i), fp(kind, i))
		return err
	}
	own.Signal(syscall.SIGSTOP)
	// The leaders take every lane, alone, and give up at 500 ms; the calls
	// queued behind them go as pipelines then, and give up at 800 ms, while
	// those wait for a reply; two more give up at 50 ms, before they go
	// (the margins leave a loaded machine time to queue every call before
	// a lane frees).
	var wg sync.WaitGroup
	for i := range pipelineLanes {
		wg.Go(func() {
			if err := reserve(500*time.Millisecond, "leader", i); err == nil {
				t.Errorf("leader %d succeeded against a stopped Redis", i)
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	const sent, early = 20, 2
	for i := range sent + early {
		wg.Go(func() {
			d, kind := 800*time.Millisecond, "sent"
			if i >= sent {
				d, kind = 50*time.Millisecond, "early"
			}
			if err := reserve(d, kind, i); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s call %d = %v; want its deadline", kind, i, err)
			}
		})
	}
	wg.Wait()
	// New calls reuse pooled calls while the abandoned ones are on the wire.
	for i := range 2 * sent {
		wg.Go(func() {
			k := key("later", i)
			res, err := s.Reserve(ctx, k, fp("later", i))
			if err != nil {
				t.Errorf("later call %d = %v", i, err)
				return
			}
			if err := s.Complete(ctx, k, res.Claim.Token, &keystore.Response{Status: 200, Body: []byte(fmt.Sprint("later-", i))}); err != nil {
				t.Errorf("later complete %d = %v", i, err)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	own.Signal(syscall.SIGCONT)
	wg.Wait()
	for i := range sent + early {
		kind := "sent"
		if i >= sent {
			kind = "early"
		}
		rec, err := s.Get(ctx, key(kind, i))
		switch {
		case kind == "early" && !errors.Is(err, keystore.ErrNotFound):
			t.Errorf("early call %d: %+v, %v; want no record (it gave up before its pipeline went)", i, rec, err)
		case kind == "sent" && (err != nil || rec.Fingerprint != fp(kind, i).Fingerprint || rec.State != keystore.StateInFlight):
			t.Errorf("sent call %d: %+v, %v; want its own fingerprint, in flight", i, rec, err)
		}
	}
	for i := range 2 * sent {
		rec, err := s.Get(ctx, key("later", i))
		if err != nil || rec.Response == nil || string(rec.Response.Body) != fmt.Sprint("later-", i) || rec.Fingerprint != fp("later", i).Fingerprint {
			t.Errorf("later record %d: %+v, %v; want its own answer and fingerprint", i, rec, err)
		}
	}
}
