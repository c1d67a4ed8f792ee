package app

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
)

// TestRedisE2EWaitAcrossReplicas is issue 16's wait proof on two replicas
// sharing one Redis: 50 keys × 20 duplicates, half on each replica, sent
// while the originals (on replica A) run for 300 ms → every duplicate gets
// its original's byte-identical answer with Idempotent-Replayed, none gets
// 409, and the upstream runs exactly 50 times.
func TestRedisE2EWaitAcrossReplicas(t *testing.T) {
	addr := redistest.Addr(t)
	var execs execCounter
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		_, n := execs.add(key)
		time.Sleep(300 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"execution":%d,"key":%q}`, n, key)
	}))
	t.Cleanup(up.Close)
	// A longer store timeout than e2eYAML's: 1000 requests hit each
	// replica's pool of connections at once, under -race, on a shared
	// machine.
	yaml := strings.Replace(e2eYAML(up.URL, addr, e2ePrefix(t), `
idempotency: {in_progress: wait, wait_timeout: 10s}
sessions: {queue_depth: 20}
`), "timeout: 3s", "timeout: 10s", 1)
	a := startReplica(t, e2eConfig(t, yaml))
	b := startReplica(t, e2eConfig(t, yaml))
	c := e2eClient(t)
	const keys, dups = 50, 20
	originals := make([]e2eAnswer, keys)
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() { originals[k] = post(c, a, fmt.Sprint("key-", k), `{"x":1}`) })
	}
	testutil.Eventually(t, 5*time.Second, "the originals to reach the upstream", func() bool { _, total := execs.snapshot(); return total == keys })
	got := make([][]e2eAnswer, keys)
	for k := range keys {
		got[k] = make([]e2eAnswer, dups)
		for d := range dups {
			base := a
			if d%2 == 1 {
				base = b
			}
			wg.Go(func() { got[k][d] = post(c, base, fmt.Sprint("key-", k), `{"x":1}`) })
		}
	}
	wg.Wait()
	conflicts := 0
	for k := range keys {
		if originals[k].status != http.StatusCreated {
			t.Fatalf("original %d = %v", k, originals[k])
		}
		for d, r := range got[k] {
			if r.status == http.StatusConflict {
				conflicts++
				continue
			}
			if r.err != nil || r.status != http.StatusCreated || r.body != originals[k].body || r.header.Get("Idempotent-Replayed") != "true" {
				t.Errorf("key %d duplicate %d = %v, want %v replayed", k, d, r, originals[k])
			}
		}
	}
	if _, total := execs.snapshot(); conflicts != 0 || total != keys {
		t.Errorf("%d × 409, %d executions; want 0 and %d", conflicts, total, keys)
	}
}
