package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/testutil"
	"github.com/idemgate/idemgate/keystore"
)

type syncBuffer = testutil.SyncBuffer

func TestVersion(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "idemgate ") {
		t.Errorf("version printed %q", out.String())
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `
upstream: {url: "http://127.0.0.1:3000"}
routes:
  - {name: create_cart, method: POST, path: /ucp/v1/carts, idempotent: true, rate_limit: {requests: 600, per: 60s}}
  - {name: get_cart, method: GET, path: "/ucp/v1/carts/{id}"}
`)
	bad := write("bad.yaml", `
upstream: {url: ""}
idempotency: {reuse_status: 418, lease: 5}
routes:
  - {name: a, method: GET, path: /x, idempotent: true}
  - {name: a, method: POST, path: "/y/{id}", session: cart}
`)
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"validate", "--config", good}, &out, &errOut); err != nil {
		t.Fatalf("validate good = %v\n%s", err, errOut.String())
	}
	for _, want := range []string{"valid", "create_cart", "POST", "/ucp/v1/carts", "idempotent", "rate_limit=600/1m0s", "get_cart"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("validate output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	errOut.Reset()
	if err := run(context.Background(), []string{"validate", "--config", bad}, &out, &errOut); err == nil {
		t.Fatalf("validate bad = nil; want an error")
	}
	// lease: 5 fails at decoding (a duration without unit); fix that and the
	// rest are reported together, one line each, naming the key.
	for _, want := range []string{"idempotency.lease"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("validate errors lack %q:\n%s", want, errOut.String())
		}
	}
	bad2 := write("bad2.yaml", `
upstream: {url: ""}
idempotency: {reuse_status: 418}
routes:
  - {name: a, method: GET, path: /x, idempotent: true}
  - {name: a, method: POST, path: "/y/{id}", session: cart}
`)
	errOut.Reset()
	if err := run(context.Background(), []string{"validate", "--config", bad2}, &out, &errOut); err == nil {
		t.Fatalf("validate bad2 = nil; want an error")
	}
	for _, want := range []string{"upstream.url", "idempotency.reuse_status", "routes[0].idempotent", "routes[1].name", "routes[1].session"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("validate errors lack %q:\n%s", want, errOut.String())
		}
	}
}

// curlLine runs one of the demo's curl lines with net/http and returns the
// status, the headers and the body.
func curlLine(t *testing.T, line string) (int, http.Header, []byte) {
	t.Helper()
	args := shellSplit(line)
	method, url, body := "GET", "", ""
	hdr := http.Header{}
	for i := 1; i < len(args); i++ {
		switch args[i] {
		case "-X":
			i++
			method = args[i]
		case "-H":
			i++
			k, v, _ := strings.Cut(args[i], ":")
			hdr.Add(k, strings.TrimSpace(v))
		case "-d":
			i++
			body = args[i]
		case "-s", "-si", "-i":
		default:
			url = args[i]
		}
	}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b
}

func shellSplit(s string) []string {
	var out []string
	re := regexp.MustCompile(`'[^']*'|\S+`)
	for _, m := range re.FindAllString(s, -1) {
		out = append(out, strings.Trim(m, "'"))
	}
	return out
}

func TestDemo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, &stdout, &stderr)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(stdout.String(), "Ctrl-C") {
		if time.Now().After(deadline) {
			t.Fatalf("demo did not start:\n%s\n%s", stdout.String(), stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var lines []string
	for _, l := range strings.Split(stdout.String(), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "curl ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 7 {
		t.Fatalf("demo printed %d curl lines; want 7:\n%s", len(lines), stdout.String())
	}
	type want struct {
		status   int
		replayed bool
		code     string
	}
	wants := []want{{201, false, ""}, {201, true, ""}, {409, false, "idempotency_key_reused"}, {201, false, ""}, {201, false, ""}, {201, true, ""}, {200, false, ""}}
	var bodies [][]byte
	for i, l := range lines {
		status, hdr, body := curlLine(t, l)
		bodies = append(bodies, body)
		w := wants[i]
		if status != w.status || (hdr.Get("Idempotent-Replayed") == "true") != w.replayed || (w.code != "" && !strings.Contains(string(body), w.code)) {
			t.Errorf("line %d %q = %d replayed=%q %s; want %+v", i+1, l, status, hdr.Get("Idempotent-Replayed"), body, w)
		}
	}
	if !bytes.Equal(bodies[0], bodies[1]) || !bytes.Equal(bodies[4], bodies[5]) {
		t.Errorf("replays differ from the first answers")
	}
	var stats struct {
		Executions int `json:"executions"`
		Orders     int `json:"orders"`
	}
	if err := json.Unmarshal(bodies[6], &stats); err != nil || stats.Executions != 3 || stats.Orders != 1 {
		t.Errorf("upstream stats = %s (%v); want 3 executions, 1 order", bodies[6], err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("demo returned %v", err)
	}
	if strings.Contains(stderr.String(), "demo-1") || strings.Contains(stderr.String(), "pay-1") {
		t.Errorf("a key reached the log")
	}
}

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
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := newApp(cfg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	lns, err := listen("127.0.0.1:0", "127.0.0.1:0")
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
	go func() { served <- a.serve(ctx, 10*time.Second, lns) }()
	url := "http://" + lns.public.Addr().String() + "/pay"
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
