package app

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
)

// TestLateAnswerE2E is issue 26's proof of late answers, from the config
// to the store: a counting upstream that takes 3 s behind timeout: 1s. The
// client's 504 comes at about 1 s; a retry at about 4 s replays the late
// answer, and the write ran once: on the memory store, and on a real Redis
// with the retry sent to a second replica.
func TestLateAnswerE2E(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		redis bool
	}{{"memory", false}, {"redis_second_replica", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var execs execCounter
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n, _ := execs.add(r.Header.Get("Idempotency-Key"))
				io.Copy(io.Discard, r.Body)
				select {
				case <-time.After(3 * time.Second): // the slow write
				case <-r.Context().Done():
					return
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, `{"exec":%d}`, n)
			}))
			t.Cleanup(up.Close)
			yaml := `
upstream: {url: "` + up.URL + `"}
edge_limit: {rate: 0}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true, timeout: 1s}
`
			var first, second string
			if tc.redis {
				yaml += `
store:
  backend: redis
  redis: {addrs: ["` + redistest.Addr(t) + `"], key_prefix: "` + e2ePrefix(t) + `", timeout: 3s}
`
				first = startReplica(t, e2eConfig(t, yaml))
				second = startReplica(t, e2eConfig(t, yaml))
			} else {
				first = startReplica(t, e2eConfig(t, yaml))
				second = first
			}
			c := e2eClient(t)
			start := time.Now()
			a := post(c, first, "late-1", `{"amount":100}`)
			took := time.Since(start)
			if a.err != nil || a.status != http.StatusGatewayTimeout {
				t.Fatalf("first = %v; want 504 upstream_timeout", a)
			}
			if took < 900*time.Millisecond || took > 2500*time.Millisecond {
				t.Errorf("the 504 came after %v; want about 1s", took)
			}
			<-time.After(time.Until(start.Add(4 * time.Second))) // the retry at about 4s
			b := replayed(c, second, "late-1", `{"amount":100}`)
			if b.err != nil || b.status != http.StatusCreated || b.body != `{"exec":1}` || b.header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("retry at 4s = %v %v; want the late answer replayed", b, b.header)
			}
			if n := execs.get("late-1"); n != 1 {
				t.Errorf("executions = %d; want 1", n)
			}
		})
	}
}
