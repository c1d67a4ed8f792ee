package memstore

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keystore"
)

// BenchmarkMemoryPerRecord reports the heap a completed record costs beyond
// its answer (status, headers and body as encoded: the target is at most 256
// bytes), and beyond its body alone, with typical upstream headers.
func BenchmarkMemoryPerRecord(b *testing.B) {
	const n = 100_000
	body := make([]byte, 1024)
	hdr := http.Header{
		"Content-Type":  {"application/json"},
		"Location":      {"/ucp/v1/carts/cart_123456"},
		"Cache-Control": {"no-store"},
	}
	ctx := context.Background()
	for range b.N {
		s := New(Options{MaxEntries: 2 * n})
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range n {
			k := keystore.NewKey(fmt.Sprint(i))
			res, err := s.Reserve(ctx, k, keystore.ReserveOptions{Route: "create_cart", Lease: time.Minute, Retention: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Complete(ctx, k, res.Token, &keystore.Response{Status: 201, Header: hdr, Body: body}); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		per := float64(after.HeapInuse-before.HeapInuse) / n
		answer := len(keystore.EncodeResponse(&keystore.Response{Status: 201, Header: hdr, Body: body}))
		b.ReportMetric(per-float64(answer), "B-over-answer/record")
		b.ReportMetric(per-float64(len(body)), "B-over-body/record")
		runtime.KeepAlive(s)
		s.Close()
	}
}
