package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/keystore"
)

// TestDrain: SIGTERM (here: the context ending) while keyed writes are in
// flight lets each finish and be recorded before the store closes.
func TestDrain(t *testing.T) {
	t.Parallel()
	var arrived atomic.Int32
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		<-release
		w.WriteHeader(201)
		fmt.Fprintf(w, "done %s", r.Header.Get("Idempotency-Key"))
	}))
	defer up.Close()
	cfg, err := config.Parse([]byte(`
upstream: {url: "` + up.URL + `"}
edge_limit: {rate: 0}
idempotency: {require_identity: false}  # anonymous clients: the key alone scopes
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	lns, err := Listen("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const n = 5
	var recorded []keystore.State
	a.afterDrain = func() {
		for i := range n {
			k := keystore.NewKey("v1", "", "0", fmt.Sprint("k", i)) // scope: tenant "", no Authorization
			rec, err := a.store.Get(context.Background(), k)
			if err != nil {
				t.Errorf("key %d after drain: %v", i, err)
				continue
			}
			recorded = append(recorded, rec.State)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, 10*time.Second, lns) }()
	url := "http://" + lns.Public.Addr().String() + "/pay"
	results := make(chan string, n)
	for i := range n {
		go func() {
			req, _ := http.NewRequest("POST", url, strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", fmt.Sprint("k", i))
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				results <- err.Error()
				return
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			results <- fmt.Sprint(res.StatusCode, " ", string(b))
		}()
	}
	for arrived.Load() < n {
		time.Sleep(time.Millisecond)
	}
	cancel() // SIGTERM
	// Readiness turns off while draining.
	time.Sleep(20 * time.Millisecond)
	close(release)
	for range n {
		if r := <-results; !strings.HasPrefix(r, "201 done k") {
			t.Errorf("in-flight write during drain = %q; want 201", r)
		}
	}
	if err := <-served; err != nil {
		t.Errorf("serve = %v", err)
	}
	if len(recorded) != n {
		t.Fatalf("%d records after drain; want %d", len(recorded), n)
	}
	for i, s := range recorded {
		if s != keystore.StateCompleted {
			t.Errorf("key %d state after drain = %v; want completed", i, s)
		}
	}
}

// TestHealth: /readyz follows the app's state (starting, ready, draining);
// /healthz answers while the process lives, draining included.
func TestHealth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		ready, draining bool
		path            string
		want            int
	}{
		{"ready", true, false, "/readyz", 200},
		{"starting", false, false, "/readyz", 503},
		{"draining", true, true, "/readyz", 503},
		{"alive while draining", true, true, "/healthz", 200},
		{"unknown path", true, false, "/nope", 404},
	}
	cfg := config.Default()
	cfg.Upstream.URL = "http://127.0.0.1:1"
	a, err := New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	srv := httptest.NewServer(a.adminHandler())
	t.Cleanup(srv.Close)
	for _, tt := range tests {
		a.ready.Store(tt.ready)
		a.draining.Store(tt.draining)
		res, err := srv.Client().Get(srv.URL + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tt.want {
			t.Errorf("%s: GET %s = %d; want %d", tt.name, tt.path, res.StatusCode, tt.want)
		}
	}
}
