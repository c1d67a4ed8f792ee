package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/keystore/memstore"
)

// BenchmarkLateCallsKept measures the memory of late_answer_max (1000)
// kept calls (issue 26, Proof): 1000 keyed writes with 4 KiB bodies whose
// upstream answers after their timeout are all kept at once, detached
// from their clients (who got 504). It reports the Go heap the kept calls
// hold (heap-MiB, in use after a GC, over the heap before them), per call
// (heap-KiB/call), and their share of max_buffered_bytes (budget-MiB, the
// bodies charged to it); it fails if the heap they hold exceeds
// max_buffered_bytes (256 MiB, DESIGN.md's Bounds). Run it once:
//
//	go test -run '^$' -bench BenchmarkLateCallsKept -benchtime 1x ./proxy/
func BenchmarkLateCallsKept(b *testing.B) {
	const calls, bodySize = 1000, 4 << 10
	const budget = 256 << 20
	for b.Loop() {
		release := make(chan struct{})
		var arrived sync.WaitGroup
		arrived.Add(calls)
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			arrived.Done()
			<-release
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"ok":true}`)
		}))
		wait := time.Minute
		// The harness takes a *testing.T for its cleanups; this one is
		// closed by hand below.
		tp := newTestProxy(&testing.T{}, up.URL, func(o *Options, _ *memstore.Options) {
			o.Stages.Routes = []Route{{Name: "pay", Method: "POST", Path: "/pay", Idempotent: true, Timeout: 200 * time.Millisecond, LateAnswerWait: &wait}}
			o.Idempotency.LateAnswerMax = calls
			o.MaxBufferedBytes = budget
			o.Transport = &http.Transport{MaxIdleConnsPerHost: calls}
		})
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: calls, MaxConnsPerHost: 0}}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		body := strings.Repeat("x", bodySize-20)
		var done sync.WaitGroup
		var failed sync.Map
		for i := range calls {
			done.Add(1)
			go func() {
				defer done.Done()
				req, _ := http.NewRequest("POST", tp.URL+"/pay", strings.NewReader(`{"pad":"`+body+`"}`))
				req.Header.Set("Idempotency-Key", fmt.Sprintf("late-%d", i))
				req.Header.Set("Authorization", "Bearer bench")
				req.Header.Set("Content-Type", "application/json")
				res, err := client.Do(req)
				if err != nil {
					failed.Store(i, err.Error())
					return
				}
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusGatewayTimeout {
					failed.Store(i, res.Status)
				}
			}()
		}
		done.Wait()
		arrived.Wait()
		failed.Range(func(k, v any) bool { b.Fatalf("call %v: %v; want 504", k, v); return false })
		if n := tp.p.late.n.Load(); n != calls {
			b.Fatalf("kept calls = %d; want %d", n, calls)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		held := float64(after.HeapInuse) - float64(before.HeapInuse)
		b.ReportMetric(held/(1<<20), "heap-MiB")
		b.ReportMetric(held/calls/(1<<10), "heap-KiB/call")
		b.ReportMetric(float64(tp.p.budget.Used())/(1<<20), "budget-MiB")
		if held > budget {
			b.Errorf("the kept calls hold %.0f MiB of heap; want at most max_buffered_bytes (%d MiB)", held/(1<<20), budget>>20)
		}
		close(release)
		for i := 0; i < 1000 && tp.p.late.n.Load() > 0; i++ {
			<-time.After(10 * time.Millisecond)
		}
		client.CloseIdleConnections()
		tp.Close()
		tp.p.Close()
		tp.store.Close()
		up.Close()
	}
}
