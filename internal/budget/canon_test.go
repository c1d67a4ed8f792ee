package budget_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/internal/budget"
	"github.com/idemgate/idemgate/internal/canonjson"
	"github.com/idemgate/idemgate/limiter"
)

// TestCanonicalizeUnderBudget: many goroutines read, canonicalize (charging
// the canonicalizer's memory to the body) and give back, against a budget
// too small for all at once. Every request either succeeds or is refused as
// overloaded, the successful canonical forms are right, and the budget ends
// at zero.
func TestCanonicalizeUnderBudget(t *testing.T) {
	t.Parallel()
	var doc bytes.Buffer
	doc.WriteString("{")
	for i := range 4000 {
		if i > 0 {
			doc.WriteByte(',')
		}
		fmt.Fprintf(&doc, `"%05d":[0,0]`, 9999-i)
	}
	doc.WriteString("}")
	want, _ := canonjson.Append(nil, doc.Bytes(), nil)
	const goroutines = 64
	b := budget.New(int64(24*doc.Len()), int64(12*doc.Len())) // a few at a time
	var ok, overloaded atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		k := limiter.Bucket(netip.AddrFrom4([4]byte{198, 51, 100, byte(g % 4)}))
		wg.Go(func() {
			body, err := b.Read(k, bytes.NewReader(doc.Bytes()), int64(doc.Len()), &budget.ReadOptions{Limit: 1 << 20})
			if errors.Is(err, budget.ErrOverloaded) {
				overloaded.Add(1)
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			defer body.Free()
			out, charged, canon, err := canonjson.AppendCharged(nil, body.Bytes(), nil, body.Charge)
			defer body.Uncharge(charged)
			switch {
			case errors.Is(err, budget.ErrOverloaded):
				overloaded.Add(1)
			case err != nil || !canon:
				t.Errorf("canonicalize: %v, %v", canon, err)
			case !bytes.Equal(out, want):
				t.Error("canonical form differs")
			default:
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if got := ok.Load() + overloaded.Load(); got != goroutines {
		t.Errorf("succeeded %d + overloaded %d = %d; want %d", ok.Load(), overloaded.Load(), got, goroutines)
	}
	if ok.Load() < 2 {
		t.Errorf("%d succeeded; want several", ok.Load())
	}
	if b.Used() != 0 {
		t.Errorf("budget used at the end = %d; want 0", b.Used())
	}
	t.Logf("%d succeeded, %d overloaded", ok.Load(), overloaded.Load())
}
