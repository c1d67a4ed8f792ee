package app

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
)

// reloadYAML is a config with the route pay, plus extra routes (YAML list
// items) and extra top-level keys.
func reloadYAML(upstream, routes, top string) string {
	return `upstream: {url: "` + upstream + `"}
edge_limit: {rate: 0}
idempotency: {require_identity: false}  # anonymous clients
` + top + `
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
` + routes
}

const ordersRoute = "  - {name: orders, method: POST, path: /orders, idempotent: true}\n"

// kubeMount is a directory laid out as the kubelet mounts a ConfigMap:
// config.yaml -> ..data/config.yaml, ..data -> ..<timestamp>.
type kubeMount struct {
	dir string
	gen int
}

func newKubeMount(t *testing.T, data string) *kubeMount {
	t.Helper()
	m := &kubeMount{dir: t.TempDir()}
	m.update(t, data)
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), m.path()); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *kubeMount) path() string { return filepath.Join(m.dir, "config.yaml") }

// startWatched runs an app for yaml, watching it in a ConfigMap-style
// mount that the test updates.
func startWatched(t *testing.T, yaml string) (*opsApp, *kubeMount) {
	t.Helper()
	km := newKubeMount(t, yaml)
	return startOpsApp(t, yaml, km.path(), nil), km
}

// update is the kubelet's AtomicWriter: a new timestamped directory, a
// ..data_tmp symlink to it renamed over ..data, the old directory removed.
func (m *kubeMount) update(t *testing.T, data string) {
	t.Helper()
	m.gen++
	ts := fmt.Sprintf("..2026_11_30_12_%02d_%02d.%09d", m.gen/60, m.gen%60, m.gen)
	if err := os.Mkdir(filepath.Join(m.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.dir, ts, "config.yaml"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	old, _ := os.Readlink(filepath.Join(m.dir, "..data"))
	if err := os.Symlink(ts, filepath.Join(m.dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(m.dir, "..data_tmp"), filepath.Join(m.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(m.dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// routeNames returns the names of the routes the proxy serves now.
func (oa *opsApp) routeNames() []string {
	var names []string
	for _, r := range oa.proxy.Policy().Routes {
		names = append(names, r.Name)
	}
	return names
}

func (oa *opsApp) waitRoutes(t *testing.T, want ...string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("routes %v (have %v)", want, oa.routeNames()), func() bool { return slices.Equal(oa.routeNames(), want) })
}

func (oa *opsApp) reloads(t *testing.T, result string) float64 {
	return testutil.Gathered(t, oa.reg, "idemgate_config_reloads_total", "result", result)
}

// TestReloadConfigMap: a ConfigMap update, reproduced exactly, applies the
// new routes; keys then work on the new route.
func TestReloadConfigMap(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	v1 := reloadYAML(up.URL, "", "")
	oa, km := startWatched(t, v1)
	c := e2eClient(t)
	for range 2 {
		if a := doHTTP(t, c, "POST", oa.base+"/orders", `{}`, "Idempotency-Key", "o1"); a.status != 201 {
			t.Fatalf("/orders before = %v", a)
		}
	}
	if n := up.count("/orders", "o1"); n != 2 {
		t.Errorf("/orders ran %d times before the reload; want 2 (pass-through)", n)
	}
	km.update(t, reloadYAML(up.URL, ordersRoute, ""))
	oa.waitRoutes(t, "pay", "orders")
	for range 2 {
		doHTTP(t, c, "POST", oa.base+"/orders", `{}`, "Idempotency-Key", "o2")
	}
	if n := up.count("/orders", "o2"); n != 1 {
		t.Errorf("/orders ran %d times after the reload; want 1 (keyed)", n)
	}
	// A second update (the first timestamped directory is gone by now).
	km.update(t, reloadYAML(up.URL, "", ""))
	oa.waitRoutes(t, "pay")
	// The routes are in force before the reload is counted and logged.
	testutil.Eventually(t, 10*time.Second, "reloads{success} = 2", func() bool { return oa.reloads(t, "success") == 2 })
	if got := oa.reloads(t, "success"); got != 2 {
		t.Errorf("reloads{success} = %v; want 2", got)
	}
	if !strings.Contains(oa.logs.String(), `"msg":"config reloaded"`) {
		t.Errorf("no reload logged")
	}
}

// TestReloadReplaceInPlaceInvalid: a rename over the file and a write in
// place apply; an invalid file is refused with one log line and a metric
// while the old routes keep serving; keys that need a restart are reported
// and ignored; limits and modes reload.
func TestReloadReplaceInPlaceInvalid(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "idemgate.yaml")
	v1 := reloadYAML(up.URL, "", "")
	if err := os.WriteFile(path, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	oa := startOpsApp(t, v1, path, nil)
	c := e2eClient(t)
	pay := func(key string) httpAnswer { return doHTTP(t, c, "POST", oa.base+"/pay", `{}`, "Idempotency-Key", key) }

	// Rename-over (an editor's save, kubectl cp).
	tmp := filepath.Join(dir, ".idemgate.yaml.swp")
	if err := os.WriteFile(tmp, []byte(reloadYAML(up.URL, ordersRoute, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	oa.waitRoutes(t, "pay", "orders")

	// In place: pay in observe mode, a limit on orders.
	inPlace := reloadYAML(up.URL, "  - {name: orders, method: POST, path: /orders, idempotent: true, rate_limit: {requests: 1, per: 1m}}\n", "mode: observe")
	if err := os.WriteFile(path, []byte(inPlace), 0o600); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "observe mode", func() bool { return len(oa.proxy.Policy().Routes) == 2 && oa.proxy.Policy().Routes[0].Observe })
	pay("p1")
	pay("p1")
	if n := up.count("/pay", "p1"); n != 2 {
		t.Errorf("pay in observe mode ran %d times; want 2", n)
	}
	if a := doHTTP(t, c, "POST", oa.base+"/orders", `{}`, "Idempotency-Key", "o1"); a.status != 201 {
		t.Errorf("first /orders = %v", a)
	}
	if a := doHTTP(t, c, "POST", oa.base+"/orders", `{}`, "Idempotency-Key", "o2"); a.status != 429 {
		t.Errorf("second /orders = %v; want 429 (the reloaded limit)", a)
	}

	// Invalid: refused, one log line, the metric; the old config serves.
	// (Replaced by rename, so that no half-written file is read; a write
	// in place read half-way would be refused the same way.)
	for i, bad := range []struct{ yaml, problem string }{
		{reloadYAML(up.URL, "  - {name: pay, method: GET, path: /x}\n", ""), "routes[1].name"}, // duplicate route name
		{"upstream: {url: \"" + up.URL + "\"}\nroutez: []\n", "routez: unknown key"},           // unknown key
		{"::: not yaml", "yaml"},
	} {
		before := oa.reloads(t, "failure")
		if err := os.WriteFile(tmp, []byte(bad.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("refusal %d", i+1), func() bool { return oa.reloads(t, "failure") > before })
		if !strings.Contains(oa.logs.String(), bad.problem) {
			t.Errorf("refusal %d does not name %q", i+1, bad.problem)
		}
	}
	if got := testutil.Gathered(t, oa.reg, "idemgate_config_last_reload_successful"); got != 0 {
		t.Errorf("last_reload_successful = %v; want 0", got)
	}
	if n, want := strings.Count(oa.logs.String(), "config reload refused"), int(oa.reloads(t, "failure")); n != want {
		t.Errorf("%d refusal lines for %d refusals; want one each", n, want)
	}
	if got := oa.routeNames(); !slices.Equal(got, []string{"pay", "orders"}) {
		t.Errorf("routes after refusals = %v; want the old ones", got)
	}
	pay("p2")
	pay("p2")
	if n := up.count("/pay", "p2"); n != 2 {
		t.Errorf("pay after refusals ran %d times; want 2 (still observe mode)", n)
	}

	// Keys that need a restart: reported, ignored; the rest applies.
	restart := reloadYAML(up.URL, "", "listen: \"127.0.0.1:1\"\ntracing: {enabled: true}\nstore: {memory: {max_entries: 5}}")
	if err := os.WriteFile(path, []byte(restart), 0o600); err != nil {
		t.Fatal(err)
	}
	oa.waitRoutes(t, "pay")
	testutil.Eventually(t, 10*time.Second, "restart required", func() bool {
		return testutil.Gathered(t, oa.reg, "idemgate_config_restart_required") == 1
	})
	logs := oa.logs.String()
	if !strings.Contains(logs, `"keys":["listen","tracing.enabled"]`) || !strings.Contains(logs, "need a restart") {
		t.Errorf("the restart-only keys were not reported:\n%s", logs)
	}
	if got := testutil.Gathered(t, oa.reg, "idemgate_config_last_reload_successful"); got != 1 {
		t.Errorf("last_reload_successful = %v; want 1", got)
	}
	if a := pay("p3"); a.status != 201 {
		t.Errorf("pay = %v", a)
	}
	if a := pay("p3"); a.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("pay retry = %v; want a replay (enforce mode again)", a)
	}
}

// TestReloadUnderTraffic: 1,000 keyed writes sent while the config is
// reloaded again and again (ConfigMap swaps, valid and invalid): none
// fails, and each runs once.
func TestReloadUnderTraffic(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	v1 := reloadYAML(up.URL, "", "")
	v2 := reloadYAML(up.URL, ordersRoute, "")
	bad := reloadYAML(up.URL, ordersRoute+ordersRoute, "") // duplicate name
	oa, km := startWatched(t, v1)
	c := e2eClient(t)

	const workers, total = 8, 1000
	var next atomic.Int64
	var failures []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	done := make(chan struct{})
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > total {
					return
				}
				a := doHTTP(t, c, "POST", oa.base+"/pay", `{"n":1}`, "Idempotency-Key", fmt.Sprint("t", i))
				if a.status != 201 {
					mu.Lock()
					failures = append(failures, a.String())
					mu.Unlock()
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()

	swaps, refusals := 0, 0
	for running := true; running; {
		select {
		case <-done:
			running = false
			continue
		default:
		}
		switch swaps % 3 {
		case 0:
			km.update(t, v2)
			oa.waitRoutes(t, "pay", "orders")
		case 1:
			km.update(t, bad)
			refusals++
			testutil.Eventually(t, 10*time.Second, "refusal", func() bool { return oa.reloads(t, "failure") == float64(refusals) })
		case 2:
			km.update(t, v1)
			oa.waitRoutes(t, "pay")
		}
		swaps++
	}
	<-done
	if len(failures) > 0 {
		t.Errorf("%d of %d requests failed during reloads; first: %s", len(failures), total, failures[0])
	}
	for i := 1; i <= total; i++ {
		if n := up.count("/pay", fmt.Sprint("t", i)); n != 1 {
			t.Errorf("key t%d ran %d times; want 1", i, n)
			break
		}
	}
	if swaps < 3 {
		t.Errorf("only %d config changes during the traffic; want at least 3", swaps)
	}
	t.Logf("%d requests, %d config changes (%d refused)", total, swaps, refusals)
}

// TestReloadSIGHUP (not parallel: it signals the test process) forces a
// read of the file.
func TestReloadSIGHUP(t *testing.T) {
	// Keep the process alive whatever happens to the app's handler.
	guard := make(chan os.Signal, 1)
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)

	up := newCountingUpstream(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	v1 := reloadYAML(up.URL, "", "")
	if err := os.WriteFile(path, []byte(v1), 0o600); err != nil {
		t.Fatal(err)
	}
	oa := startOpsApp(t, v1, path, nil)
	// Wait until the watcher made its first read (nothing to apply).
	testutil.Eventually(t, 10*time.Second, "watcher started", func() bool { oa.reload.mu.Lock(); defer oa.reload.mu.Unlock(); return oa.reload.started })
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "SIGHUP read", func() bool { return oa.reloads(t, "success") == 1 })
	if !strings.Contains(oa.logs.String(), "SIGHUP") || !strings.Contains(oa.logs.String(), "nothing to apply") {
		t.Errorf("SIGHUP not logged:\n%s", oa.logs.String())
	}
	oa.stop()
}

// TestReloadIdempotencyPolicy: the global retention, in_progress,
// wait_timeout, release_statuses and drop_headers reload without a restart: the routes
// that inherit them take the new values at once, and a route with its own
// keeps those.
func TestReloadIdempotencyPolicy(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ran := map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		ran[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		w.Header().Set("X-A", "a")
		w.Header().Set("X-B", "b")
		status := http.StatusCreated
		if r.Header.Get("X-Fail") != "" {
			status = http.StatusInternalServerError
		}
		w.WriteHeader(status)
		io.WriteString(w, "{}")
	}))
	t.Cleanup(up.Close)
	yaml := func(policy string) string {
		return `upstream: {url: "` + up.URL + `"}
edge_limit: {rate: 0}
idempotency: {require_identity: false` + policy + `}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
  - {name: own, method: POST, path: /own, idempotent: true, drop_headers: [X-A], in_progress: reject, release_statuses: []}
`
	}
	v1 := yaml(", drop_headers: [X-A]")
	oa, km := startWatched(t, v1)
	c := e2eClient(t)
	n := 0
	// twice sends a new keyed write twice (with X-Fail: the upstream
	// answers 500) and returns the second answer's X-A and X-B, and how
	// often the upstream ran it.
	twice := func(path string, fail bool) (string, int) {
		t.Helper()
		n++
		key := fmt.Sprintf("k%d", n)
		hdr := []string{"Idempotency-Key", key}
		if fail {
			hdr = append(hdr, "X-Fail", "1")
		}
		var a httpAnswer
		for range 2 {
			a = doHTTP(t, c, "POST", oa.base+path, `{}`, hdr...)
		}
		mu.Lock()
		defer mu.Unlock()
		return a.header.Get("X-A") + "," + a.header.Get("X-B"), ran[key]
	}
	check := func(path string, fail bool, wantHeaders string, wantRuns int) {
		t.Helper()
		if h, runs := twice(path, fail); h != wantHeaders || runs != wantRuns {
			t.Errorf("%s (fail %v): replayed X-A,X-B = %q, ran %d times; want %q, %d", path, fail, h, runs, wantHeaders, wantRuns)
		}
	}
	// replayAndReuse writes once with a new key, replays it and sends it
	// again with another body: the replay's replay headers and the reuse's
	// status.
	replayAndReuse := func() (string, int) {
		t.Helper()
		n++
		key := fmt.Sprintf("k%d", n)
		doHTTP(t, c, "POST", oa.base+"/pay", `{}`, "Idempotency-Key", key)
		rep := doHTTP(t, c, "POST", oa.base+"/pay", `{}`, "Idempotency-Key", key)
		reuse := doHTTP(t, c, "POST", oa.base+"/pay", `{"other":1}`, "Idempotency-Key", key)
		return rep.header.Get("Idempotent-Replayed") + "," + rep.header.Get("X-Replayed"), reuse.status
	}
	check("/pay", false, ",b", 1)
	check("/own", false, ",b", 1)
	check("/pay", true, ",b", 1) // a 500 keeps the key by default
	if h, st := replayAndReuse(); h != "true," || st != http.StatusConflict {
		t.Errorf("before the reload: replay headers %q, reuse %d; want \"true,\", 409", h, st)
	}
	big := `{"pad":"` + strings.Repeat("x", 100) + `"}`
	if a := doHTTP(t, c, "POST", oa.base+"/pay", big, "Idempotency-Key", "big-1"); a.status != http.StatusCreated {
		t.Errorf("a 111-byte body before the reload = %v; want 201", a)
	}

	km.update(t, yaml(", drop_headers: [X-B], in_progress: wait, wait_timeout: 3s, release_statuses: [500], retention: 30h, reuse_status: 422, replay_header: X-Replayed, max_body_bytes: 64"))
	testutil.Eventually(t, 10*time.Second, "the reload", func() bool { return oa.reloads(t, "success") == 1 })
	if h, st := replayAndReuse(); h != ",true" || st != http.StatusUnprocessableEntity {
		t.Errorf("after the reload: replay headers %q, reuse %d; want \",true\", 422", h, st)
	}
	if a := doHTTP(t, c, "POST", oa.base+"/pay", big, "Idempotency-Key", "big-2"); a.status != http.StatusRequestEntityTooLarge || !strings.Contains(a.body, "request_too_large") {
		t.Errorf("a 111-byte body after max_body_bytes: 64 = %v; want 413 request_too_large", a)
	}
	check("/pay", false, "a,", 1) // the new global drop_headers
	check("/own", false, ",b", 1) // its own
	if _, runs := twice("/pay", true); runs != 2 {
		t.Errorf("/pay answered 500 ran %d times; want 2 (release_statuses: [500] releases the key)", runs)
	}
	check("/own", true, ",b", 1) // its own release_statuses: none
	pol := oa.proxy.Policy()
	if id := pol.Idempotency; fmt.Sprintf("%s %v %v", id.InProgress, id.WaitTimeout, id.Retention) != "wait 3s 30h0m0s" {
		t.Errorf("policy: in_progress, wait_timeout, retention = %s %v %v; want wait 3s 30h0m0s", id.InProgress, id.WaitTimeout, id.Retention)
	}
	for _, r := range pol.Routes {
		want := map[string]string{"pay": " 0s 0s", "own": "reject 0s 0s"}[r.Name] // own keys; the rest inherit the policy's
		if got := fmt.Sprintf("%s %v %v", r.InProgress, r.WaitTimeout, r.Retention); got != want {
			t.Errorf("route %s: own in_progress, wait_timeout, retention = %s; want %s", r.Name, got, want)
		}
	}
	if strings.Contains(oa.logs.String(), "need a restart") {
		t.Errorf("a reload of these keys asked for a restart:\n%s", oa.logs)
	}
}

// request_body_timeout reloads live (the proxy's bounds test shows the
// stages' value in force: proxy.TestBodyTimeoutReloaded).
func TestReloadRequestBodyTimeout(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	oa, km := startWatched(t, reloadYAML(up.URL, "", "request_body_timeout: 1m"))
	if got := oa.proxy.Policy().RequestBodyTimeout; got != time.Minute {
		t.Fatalf("stages' request_body_timeout at start = %v; want 1m", got)
	}
	km.update(t, reloadYAML(up.URL, "", "request_body_timeout: 300ms"))
	testutil.Eventually(t, 10*time.Second, "the reload", func() bool { return oa.reloads(t, "success") == 1 })
	if got := oa.proxy.Policy().RequestBodyTimeout; got != 300*time.Millisecond {
		t.Errorf("stages' request_body_timeout after the reload = %v; want 300ms", got)
	}
	if strings.Contains(oa.logs.String(), "need a restart") {
		t.Errorf("request_body_timeout asked for a restart:\n%s", oa.logs)
	}
}

// idempotency.header reloads live; the reload warns that retries still
// sending their key in the old header run again.
func TestReloadKeyHeader(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	yaml := func(header string) string {
		return `upstream: {url: "` + up.URL + `"}
edge_limit: {rate: 0}
idempotency: {require_identity: false, header: ` + header + `}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
`
	}
	oa, km := startWatched(t, yaml("Idempotency-Key"))
	km.update(t, yaml("X-Idem"))
	testutil.Eventually(t, 10*time.Second, "the reload", func() bool { return oa.reloads(t, "success") == 1 })
	c := e2eClient(t)
	for range 2 {
		if a := doHTTP(t, c, "POST", oa.base+"/pay", `{}`, "X-Idem", "h1"); a.status != http.StatusCreated {
			t.Fatalf("POST keyed by X-Idem = %v", a)
		}
	}
	if n := up.count("/pay", ""); n != 1 {
		t.Errorf("two writes keyed by X-Idem ran %d times; want once", n)
	}
	logs := oa.logs.String()
	if strings.Contains(logs, "need a restart") || !strings.Contains(logs, "config reload affects retries") {
		t.Errorf("the reload's log: want no restart and the warning about retries:\n%s", logs)
	}
}

// TestReloadRefusesAMixThatWouldNotValidate: a file valid on its own is
// refused when, with the running values of the keys that need a restart,
// it would not be: here a route limit in nanoseconds, which the file's
// local limiter takes and the running Redis limiter cannot count. The
// running config keeps serving; a restart applies the file.
func TestReloadRefusesAMixThatWouldNotValidate(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	redis := `redis: {addrs: ["` + redistest.Addr(t) + `"], key_prefix: "` + redistest.Prefix(t) + `"}`
	cfg := func(backend, per string) string {
		return `upstream: {url: "` + up.URL + `"}
edge_limit: {rate: 0}
store: {` + redis + `}
limiter: {backend: ` + backend + `}
idempotency: {require_identity: false}
routes:
  - {name: pay, method: POST, path: /pay, rate_limit: {requests: 5, per: ` + per + `}}
`
	}
	oa, km := startWatched(t, cfg("redis", "1s"))
	if _, err := parseConfig([]byte(cfg("local", "1500ns"))); err != nil {
		t.Fatalf("the new file is invalid on its own: %v", err)
	}
	km.update(t, cfg("local", "1500ns"))
	testutil.Eventually(t, 10*time.Second, "the refusal", func() bool { return oa.reloads(t, "failure") == 1 })
	logs := oa.logs.String()
	for _, want := range []string{"not with the running values of the keys that need a restart (limiter.backend)", "routes[0].rate_limit.per"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, logs)
		}
	}
	// A file that is valid with the running backend applies the rest.
	km.update(t, cfg("local", "2s"))
	testutil.Eventually(t, 10*time.Second, "the reload", func() bool { return oa.reloads(t, "success") == 1 })
	if got := oa.liveConfig().Routes[0].RateLimit.Per; got != 2*time.Second {
		t.Errorf("route limit per = %v; want 2s", got)
	}
}

// TestReloadLogsEffectsOnRetries: a reload that changes a route's
// fingerprints or the identity says so in its log (DESIGN.md, Config
// reload), with config.Compare's words.
func TestReloadLogsEffectsOnRetries(t *testing.T) {
	t.Parallel()
	up := newCountingUpstream(t)
	v1 := reloadYAML(up.URL, "", "")
	oa, km := startWatched(t, v1)
	km.update(t, strings.Replace(v1, "idempotent: true}", "idempotent: true, fingerprint_ignore: [/sent_at]}", 1))
	testutil.Eventually(t, 10*time.Second, "the reload", func() bool { return oa.reloads(t, "success") == 1 })
	logs := oa.logs.String()
	if !strings.Contains(logs, `"msg":"config reload affects retries of writes made before it"`) ||
		!strings.Contains(logs, "route pay: fingerprint_ignore can change its requests' fingerprints") {
		t.Errorf("the reload did not say what it does to retries:\n%s", logs)
	}
}

// TestReloadUpstream: upstream.url reloads without a restart; the next
// requests go to the new upstream.
func TestReloadUpstream(t *testing.T) {
	t.Parallel()
	up1, up2 := newCountingUpstream(t), newCountingUpstream(t)
	v1 := reloadYAML(up1.URL, "", "")
	oa, km := startWatched(t, v1)
	c := e2eClient(t)
	km.update(t, reloadYAML(up2.URL, "", ""))
	testutil.Eventually(t, 10*time.Second, "the reload", func() bool { return oa.reloads(t, "success") == 1 })
	if a := doHTTP(t, c, "POST", oa.base+"/pay", `{}`, "Idempotency-Key", "u1"); a.status != 201 {
		t.Fatalf("POST /pay = %v", a)
	}
	if n1, n2 := up1.count("/pay", "u1"), up2.count("/pay", "u1"); n1 != 0 || n2 != 1 {
		t.Errorf("executions: old upstream %d, new %d; want 0, 1", n1, n2)
	}
	if strings.Contains(oa.logs.String(), "need a restart") {
		t.Errorf("upstream.url asked for a restart:\n%s", oa.logs)
	}
}
