package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/idemgate/idemgate/keystore/compressed"
)

// BenchmarkProxyCompression is a keyed write of a real-looking 3.6 KB JSON
// answer (a Stripe charge from keystore/compressed's corpus) through the
// whole proxy on the memory store, with store.compression none and zstd:
// the first write (claim, upstream, compress, complete) and its replay
// (open, answer), and with the cache of opened answers cmd/idemgate gives
// the memory store. The client and the upstream run in this process too,
// so cpu-ns/op counts them: compare the settings, not the absolute value.
func BenchmarkProxyCompression(b *testing.B) {
	body, err := os.ReadFile("../keystore/compressed/testdata/corpus/stripe_charge.json")
	if err != nil {
		b.Fatal(err)
	}
	var hits atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		hits.Add(1)
		w.Header()["Content-Type"] = []string{"application/json"}
		w.Header()["Request-Id"] = []string{"req_8Jt3kQ1mZ0aPx2"}
		w.Write(body)
	}))
	b.Cleanup(up.Close)
	client := newBenchClient(b)
	post := func(b *testing.B, target, key string, wantReplay bool) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, target, bytes.NewReader(benchReqBody))
		if err != nil {
			b.Error(err)
			return
		}
		req.Header["Content-Type"] = []string{"application/json"}
		req.Header["Idempotency-Key"] = []string{key}
		res, err := client.Do(req)
		if err != nil {
			b.Error(err)
			return
		}
		got, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != http.StatusOK || !bytes.Equal(got, body) {
			b.Errorf("status %d, %d bytes, %v; want 200 and the upstream's body", res.StatusCode, len(got), err)
		}
		if replayed := res.Header.Get(benchReplayHeader) == "true"; replayed != wantReplay {
			b.Errorf("replayed = %v; want %v", replayed, wantReplay)
		}
	}
	for _, set := range []struct {
		name string
		o    compressed.Options
	}{
		{"none", compressed.Options{}},
		// Every replay decodes its answer: a replay of an answer not
		// opened lately.
		{"zstd", compressed.Options{Compress: true}},
		// As cmd/idemgate runs the memory store: the answers opened last
		// are kept (8 MiB), so the retries of one answer decode it once.
		{"zstd_cached", compressed.Options{Compress: true, OpenCacheBytes: 8 << 20}},
	} {
		name := set.name
		srv := newBenchIdemgate(b, up.URL, func(o *Options) {
			s, err := compressed.New(o.Store, set.o)
			if err != nil {
				b.Fatal(err)
			}
			o.Store = s // its Close is the memory store's, which the cleanup calls too
		})
		target := srv.URL + "/ucp/v1/carts"
		var seq atomic.Uint64 // across the runs b.Run makes: every key new
		b.Run("first_write/"+name, func(b *testing.B) {
			b.ReportAllocs()
			cpu := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				buf := make([]byte, 0, 32)
				for pb.Next() {
					buf = strconv.AppendUint(append(buf[:0], "first-"...), seq.Add(1), 36)
					post(b, target, string(buf), false)
				}
			})
			b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
		})
		const key = "replay"
		post(b, target, key, false)
		b.Run("replay/"+name, func(b *testing.B) {
			before := hits.Load()
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU(b)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					post(b, target, key, true)
				}
			})
			b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
			if n := hits.Load() - before; n != 0 {
				b.Errorf("the upstream ran %d replays", n)
			}
		})
	}
}
