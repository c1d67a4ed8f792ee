package memstore

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is the store's clock in tests.
type fakeClock = testutil.Clock

func newTestStore(t testing.TB, opts Options) (*Store, *fakeClock) {
	clk := testutil.NewClock(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	opts.Now = clk.Now
	s := New(opts)
	t.Cleanup(func() { s.Close() })
	return s, clk
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) (keystore.Store, func(time.Duration)) {
		s, clk := newTestStore(t, Options{})
		return s, clk.Advance
	})
}

func opts(fp string) keystore.ReserveOptions {
	return keystore.ReserveOptions{
		Fingerprint: keystore.Fingerprint(keystore.NewKey(fp)),
		Route:       "r",
		Lease:       time.Minute,
		Retention:   time.Hour,
	}
}

func TestMaxEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := newTestStore(t, Options{MaxEntries: 3})
	for i := range 3 {
		if _, err := s.Reserve(ctx, keystore.NewKey("k", string(rune('a'+i))), opts("a")); err != nil {
			t.Fatalf("Reserve #%d = %v", i, err)
		}
	}
	if _, err := s.Reserve(ctx, keystore.NewKey("k", "d"), opts("a")); !errors.Is(err, keystore.ErrFull) {
		t.Fatalf("Reserve over MaxEntries = %v; want ErrFull", err)
	}
	// Existing records still answer while the store is full.
	if _, err := s.Reserve(ctx, keystore.NewKey("k", "a"), opts("a")); !errors.Is(err, keystore.ErrInFlight) {
		t.Errorf("Reserve of a held key while full = %v; want ErrInFlight", err)
	}
	// Expired records make room, lazily and by the sweeper.
	clk.Advance(time.Hour)
	s.sweep()
	if got := s.Len(); got != 0 {
		t.Errorf("Len after sweep = %d; want 0", got)
	}
	if got := s.Bytes(); got != 0 {
		t.Errorf("Bytes after sweep = %d; want 0", got)
	}
	if _, err := s.Reserve(ctx, keystore.NewKey("k", "d"), opts("a")); err != nil {
		t.Errorf("Reserve after expiry = %v; want a claim", err)
	}
}

func TestMaxBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newTestStore(t, Options{MaxBytes: 4096})
	k := keystore.NewKey("big")
	res, err := s.Reserve(ctx, k, opts("a"))
	if err != nil {
		t.Fatal(err)
	}
	// Completing is never refused: the answer already ran upstream.
	if err := s.Complete(ctx, k, res.Token, &keystore.Response{Status: 200, Body: bytes.Repeat([]byte("x"), 8192)}); err != nil {
		t.Fatalf("Complete over MaxBytes = %v; want success", err)
	}
	if _, err := s.Reserve(ctx, keystore.NewKey("next"), opts("a")); !errors.Is(err, keystore.ErrFull) {
		t.Errorf("Reserve while over MaxBytes = %v; want ErrFull", err)
	}
	// Replays of held records go on.
	if got, err := s.Reserve(ctx, k, opts("a")); err != nil || got.Response == nil {
		t.Errorf("replay while full = %+v, %v; want a replay", got, err)
	}
}

func TestReleaseFreesRoom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newTestStore(t, Options{MaxEntries: 1})
	k := keystore.NewKey("only")
	res, err := s.Reserve(ctx, k, opts("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, k, res.Token); err != nil {
		t.Fatal(err)
	}
	if got := s.Len(); got != 0 {
		t.Errorf("Len after Release = %d; want 0", got)
	}
	if _, err := s.Reserve(ctx, keystore.NewKey("other"), opts("a")); err != nil {
		t.Errorf("Reserve after Release = %v; want a claim", err)
	}
}

func TestStoredResponseIsACopy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newTestStore(t, Options{})
	k := keystore.NewKey("copy")
	res, _ := s.Reserve(ctx, k, opts("a"))
	body := []byte("hello")
	if err := s.Complete(ctx, k, res.Token, &keystore.Response{Status: 200, Body: body}); err != nil {
		t.Fatal(err)
	}
	body[0] = 'j'
	got, _ := s.Reserve(ctx, k, opts("a"))
	if string(got.Response.Body) != "hello" {
		t.Errorf("stored body = %q; want %q (the caller's buffer was reused)", got.Response.Body, "hello")
	}
}

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) keystore.Store {
		s := New(Options{})
		b.Cleanup(func() { s.Close() })
		return s
	})
}

// Issue 15: a full store whose records expired takes a new key at once,
// without waiting for the sweeper; one whose records live still refuses.
func TestFullStoreReclaimsExpired(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"entries", Options{MaxEntries: 3}},
		{"bytes", Options{MaxBytes: 3 * (entryOverhead + 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, clk := newTestStore(t, tc.opts) // sweeper: once a minute, never on the fake clock
			for i := range 3 {
				if _, err := s.Reserve(ctx, keystore.NewKey("k", string(rune('a'+i))), opts("a")); err != nil {
					t.Fatalf("Reserve #%d = %v", i, err)
				}
			}
			if _, err := s.Reserve(ctx, keystore.NewKey("k", "d"), opts("a")); !errors.Is(err, keystore.ErrFull) {
				t.Fatalf("Reserve into a full store of live records = %v; want ErrFull", err)
			}
			if got := s.Len(); got != 3 {
				t.Errorf("Len = %d; want 3", got)
			}
			clk.Advance(time.Hour) // the retention
			if _, err := s.Reserve(ctx, keystore.NewKey("k", "e"), opts("a")); err != nil {
				t.Fatalf("Reserve into a full store of expired records = %v; want a claim at once", err)
			}
			if got := s.Len(); got != 1 {
				t.Errorf("Len after the reclaiming claim = %d; want 1", got)
			}
		})
	}
}
