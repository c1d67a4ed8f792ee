package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/memstore"
)

// flakyStore fails CompleteClaim while fails is not 0 (-1: always),
// counting the attempts.
type flakyStore struct {
	keystore.Store
	mu       sync.Mutex // protects fails, attempts
	fails    int
	attempts int
}

func (f *flakyStore) CompleteClaim(ctx context.Context, k keystore.Key, c keystore.Claim, resp *keystore.Response) (keystore.Completion, error) {
	f.mu.Lock()
	f.attempts++
	fail := f.fails != 0
	if f.fails > 0 {
		f.fails--
	}
	f.mu.Unlock()
	if fail {
		return 0, errors.New("store down")
	}
	return f.Store.CompleteClaim(ctx, k, c, resp)
}

// TestCompletionRetries runs in a synctest bubble, on its fake clock: a
// completion that fails is retried in the background with a doubling
// backoff (50 ms up to 1 s) for at most half the lease, and the record is
// stored when an attempt succeeds; when none does, the claim is left to
// its lease. Close waits for the retries.
func TestCompletionRetries(t *testing.T) {
	t.Parallel()
	const lease = 10 * time.Second
	tests := []struct {
		name         string
		fails        int
		wantAttempts int
		wantElapsed  time.Duration // until the last attempt
		wantState    keystore.State
		wantLog      string
	}{
		{"stored after two failures", 2, 3, 150 * time.Millisecond, keystore.StateCompleted, "answer stored after a retry"},
		// Retries at 0.05, 0.15, 0.35, 0.75, 1.55, 2.55, 3.55 and 4.55 s;
		// the next would end past lease/2.
		{"given up at half the lease", -1, 9, 4550 * time.Millisecond, keystore.StateInFlight, "the key will be taken over after its lease"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				mem := memstore.New(memstore.Options{})
				defer mem.Close()
				st := &flakyStore{Store: mem, fails: tt.fails}
				logs := &syncBuffer{}
				p, err := newOpts(Options{
					Upstream:    &url.URL{Scheme: "http", Host: "127.0.0.1:1"},
					Store:       st,
					Logger:      slog.New(slog.NewJSONHandler(logs, nil)),
					Idempotency: Idempotency{Lease: lease},
				})
				if err != nil {
					t.Fatal(err)
				}
				k := keystore.NewKey("k")
				res, err := mem.Reserve(ctx, k, keystore.ReserveOptions{Lease: lease, Retention: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				p.complete(ctx, &exchange{id: "r1", snap: p.cur.Load()}, k, res.Claim, &keystore.Response{Status: 201, Body: []byte("ok")})
				p.Close() // waits for the retries; the bubble's clock runs meanwhile
				if got := time.Since(start); got != tt.wantElapsed {
					t.Errorf("retries took %v; want %v", got, tt.wantElapsed)
				}
				if st.attempts != tt.wantAttempts {
					t.Errorf("%d Complete attempts; want %d", st.attempts, tt.wantAttempts)
				}
				rec, err := mem.Get(ctx, k)
				if err != nil || rec.State != tt.wantState {
					t.Errorf("record = %v, %v; want state %v", rec.State, err, tt.wantState)
				}
				if !strings.Contains(logs.String(), tt.wantLog) {
					t.Errorf("logs lack %q:\n%s", tt.wantLog, logs.String())
				}
			})
		})
	}
}
