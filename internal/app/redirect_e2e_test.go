package app

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/internal/redistest"
)

// TestRedirectReleasesKey: 307 and 308 are in the default release_statuses
// (DESIGN.md step 8: a redirect sends the write elsewhere, so it did not
// run here). A keyed write the upstream answers with a redirect gets that
// answer as it is, Location included, never marked a replay; its retry
// runs again; and the key is free for the write that follows, whose answer
// is then stored. On the memory store and on Redis.
func TestRedirectReleasesKey(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		for _, status := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
			t.Run(fmt.Sprint(store, "/", status), func(t *testing.T) {
				t.Parallel()
				var mu sync.Mutex
				runs := map[string]int{}
				up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					io.Copy(io.Discard, r.Body)
					key := r.Header.Get("Idempotency-Key")
					mu.Lock()
					runs[key]++
					n := runs[key]
					mu.Unlock()
					if n <= 2 { // the first two runs of a key are redirected
						w.Header().Set("Location", "/v2/pay?run="+fmt.Sprint(n))
						w.WriteHeader(status)
						fmt.Fprintf(w, "moved %d", n)
						return
					}
					w.WriteHeader(http.StatusCreated)
					fmt.Fprintf(w, "paid %d", n)
				}))
				t.Cleanup(up.Close)
				yaml := ""
				if store == "redis" {
					yaml = `store: {backend: redis, redis: {addrs: ["` + redistest.Addr(t) + `"], key_prefix: "` + redistest.Prefix(t) + `"}}`
				}
				a, err := New(e2eConfig(t, `
upstream: {url: "`+up.URL+`"}
edge_limit: {rate: 0}
`+yaml+`
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
`), Options{Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				base := serveTestApp(t, a)
				// The client sees the redirect itself, as a client that
				// does not follow redirects for writes would.
				c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
				pay := func() httpAnswer {
					return doHTTP(t, c, "POST", base+"/pay", `{"amount":1}`, "Idempotency-Key", "k-redirect", "Authorization", "Bearer a")
				}
				for i := 1; i <= 2; i++ {
					r := pay()
					if r.status != status || r.body != fmt.Sprintf("moved %d", i) || r.header.Get("Location") != fmt.Sprintf("/v2/pay?run=%d", i) ||
						r.header.Get("Idempotent-Replayed") != "" {
						t.Errorf("send %d = %v, Location %q, Idempotent-Replayed %q; want the upstream's run %d passed through, not a replay",
							i, r, r.header.Get("Location"), r.header.Get("Idempotent-Replayed"), i)
					}
				}
				// The key was released each time: this write runs, and its
				// answer is the one stored.
				if r := pay(); r.status != http.StatusCreated || r.body != "paid 3" || r.header.Get("Idempotent-Replayed") != "" {
					t.Errorf("write after two redirects = %v; want it run (paid 3)", r)
				}
				if r := pay(); r.status != http.StatusCreated || r.body != "paid 3" || r.header.Get("Idempotent-Replayed") != "true" {
					t.Errorf("its retry = %v; want paid 3 replayed", r)
				}
				mu.Lock()
				defer mu.Unlock()
				if runs["k-redirect"] != 3 {
					t.Errorf("the upstream ran %d times; want 3 (two redirected, one stored)", runs["k-redirect"])
				}
			})
		}
	}
}
