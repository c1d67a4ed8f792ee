package app

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/idemgate/idemgate/internal/testutil"
)

// TestLogKeysOnce: no log line of a running app carries one key twice (a
// child logger setting "component" again: the proxy's limit stage logged
// "component":"proxy" and "component":"limiter" on one line). Start, keyed
// writes, a replay, a route limit's 429 and the once-only warning about
// loopback peers without trusted proxies all log through it.
func TestLogKeysOnce(t *testing.T) {
	t.Parallel()
	probe := testutil.NewDupKeys()
	slog.New(probe).With("component", "a").With("component", "b").Info("control")
	if len(probe.Lines()) != 1 {
		t.Fatalf("the handler did not see a duplicate key: %q", probe.Lines())
	}

	dup := testutil.NewDupKeys()
	up := newCountingUpstream(t)
	cfg := e2eConfig(t, `
upstream: {url: "`+up.URL+`"}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true, rate_limit: {requests: 2, per: 1h}}
`)
	a, err := New(cfg, Options{Logger: slog.New(dup)})
	if err != nil {
		t.Fatal(err)
	}
	base := serveTestApp(t, a)
	for i, want := range []int{201, 201, 429} {
		if r := doHTTP(t, http.DefaultClient, "POST", base+"/pay", `{}`, "Idempotency-Key", "k", "Authorization", "Bearer a", "Content-Type", "application/json"); r.status != want {
			t.Errorf("request %d = %v; want %d", i, r, want)
		}
	}
	if lines := dup.Lines(); len(lines) > 0 {
		t.Errorf("log lines with a key twice:\n%q", lines)
	}
}
