package app

// End-to-end tests of two idemgate replicas sharing one real Redis (issue 3,
// Proof). They need IDEMGATE_TEST_REDIS_ADDR (scripts/redis-test.sh) and
// are skipped without it, unless IDEMGATE_REQUIRE_REDIS=1.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
)

// e2ePrefix is a Redis key prefix no other test (or run) shares.
func e2ePrefix(t *testing.T) string {
	return fmt.Sprintf("idemgate-e2e:%s:%d:%d:", t.Name(), os.Getpid(), time.Now().UnixNano())
}

// e2eYAML is a replica's config: one idempotent route POST /pay in front
// of upstream, the Redis store at redisAddr, no edge limit. extra is
// appended (e.g. an idempotency section).
func e2eYAML(upstream, redisAddr, prefix, extra string) string {
	return `
upstream: {url: "` + upstream + `"}
edge_limit: {rate: 0}
store:
  backend: redis
  # A generous timeout: hundreds of requests in flight under -race on a
  # loaded 2-core machine must not be mistaken for an outage.
  redis: {addrs: ["` + redisAddr + `"], key_prefix: "` + prefix + `", timeout: 3s}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
` + extra
}

func e2eConfig(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startReplica runs an app for cfg on loopback listeners and returns its
// public base URL. Cleanup cancels it and waits for serve to return.
func startReplica(t *testing.T, cfg *config.Config) string {
	t.Helper()
	a, err := New(cfg, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return serveTestApp(t, a)
}

// serveTestApp serves a on loopback listeners until the test ends and
// returns its public base URL (see serveUntilCleanup).
func serveTestApp(t *testing.T, a *App) string {
	t.Helper()
	lns, err := Listen("127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	serveUntilCleanup(t, a, lns)
	return "http://" + lns.Public.Addr().String()
}

// serveUntilCleanup serves a on lns (grace 5 s) and returns stop, which
// cancels it and waits, at most 15 s, for Serve to return; stop runs at
// the test's cleanup too, and only its first call acts.
func serveUntilCleanup(t *testing.T, a *App, lns *Listeners) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, 5*time.Second, lns) }()
	stop = sync.OnceFunc(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("serve = %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("app did not stop within 15s")
		}
	})
	t.Cleanup(stop)
	return stop
}

// e2eClient is an HTTP client with room for many concurrent connections.
func e2eClient(t *testing.T) *http.Client {
	tr := &http.Transport{MaxIdleConns: 1000, MaxIdleConnsPerHost: 1000, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

type e2eAnswer struct {
	status int
	header http.Header
	body   string
	err    error
}

func (a e2eAnswer) String() string {
	if a.err != nil {
		return "error: " + a.err.Error()
	}
	return fmt.Sprintf("%d %s", a.status, a.body)
}

func (a e2eAnswer) inProgress() bool {
	return a.err == nil && a.status == http.StatusConflict && strings.Contains(a.body, `"idempotency_in_progress"`)
}

// post sends one POST /pay with key (none when "") and body.
func post(c *http.Client, base, key, body string) e2eAnswer {
	req, err := http.NewRequest(http.MethodPost, base+"/pay", strings.NewReader(body))
	if err != nil {
		return e2eAnswer{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer e2e-client") // require_identity
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := c.Do(req)
	if err != nil {
		return e2eAnswer{err: err}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return e2eAnswer{status: res.StatusCode, header: res.Header, body: string(b), err: err}
}

// execCounter counts upstream executions per Idempotency-Key.
type execCounter struct {
	mu    sync.Mutex
	n     map[string]int
	total int
}

func (c *execCounter) add(key string) (perKey, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	c.total++
	return c.n[key], c.total
}

func (c *execCounter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

func (c *execCounter) snapshot() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.n))
	for k, v := range c.n {
		m[k] = v
	}
	return m, c.total
}

// TestRedisE2EConcurrentDuplicates: 200 keys × 20 concurrent duplicates
// spread over two replicas → exactly 200 upstream executions and one
// answer per key.
func TestRedisE2EConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	var execs execCounter
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		n, total := execs.add(key)
		body, _ := io.ReadAll(r.Body)
		time.Sleep(2 * time.Millisecond) // let duplicates overlap
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"exec":%d,"serial":%d,"echo":%q}`, key, n, total, body)
	}))
	defer up.Close()
	// 800 requests at once on two replicas' Redis pools: under -race on a
	// loaded machine a call may wait for a pooled connection for seconds,
	// which is no outage (pool_timeout is the timeout plus a second).
	yaml := strings.Replace(e2eYAML(up.URL, addr, e2ePrefix(t), ""), "timeout: 3s", "timeout: 10s", 1)
	bases := []string{startReplica(t, e2eConfig(t, yaml)), startReplica(t, e2eConfig(t, yaml))}
	c := e2eClient(t)

	const keys, dups = 200, 20
	const maxAttempts = 400
	deadline := time.Now().Add(60 * time.Second)
	// send retries a 409 in progress (Retry-After: 2) after a 1–5 ms pause,
	// at most maxAttempts times and never past the deadline.
	send := func(base, key, body string) (e2eAnswer, int) {
		var a e2eAnswer
		for i := 1; ; i++ {
			a = post(c, base, key, body)
			if !a.inProgress() || i >= maxAttempts || time.Now().After(deadline) {
				return a, i
			}
			if ra := a.header.Get("Retry-After"); ra != "2" {
				return e2eAnswer{err: fmt.Errorf("409 in progress with Retry-After %q; want 2", ra)}, i
			}
			time.Sleep(time.Duration(1+rand.IntN(5)) * time.Millisecond)
		}
	}
	answers := make([][dups]e2eAnswer, keys)
	var conflicts atomic.Int64
	sem := make(chan struct{}, 40) // keys in flight at once
	var wg sync.WaitGroup
	start := time.Now()
	for k := range keys {
		sem <- struct{}{}
		key := fmt.Sprintf("dup-%03d", k)
		body := fmt.Sprintf(`{"order":%d}`, k)
		gate := make(chan struct{})
		var kwg sync.WaitGroup
		for d := range dups {
			kwg.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer kwg.Done()
				<-gate
				a, n := send(bases[d%2], key, body)
				conflicts.Add(int64(n - 1))
				answers[k][d] = a
			}()
		}
		close(gate)
		go func() {
			kwg.Wait()
			<-sem
		}()
	}
	wg.Wait()
	t.Logf("%d requests in %v (%d retries after 409 in progress)", keys*dups, time.Since(start).Round(time.Millisecond), conflicts.Load())

	perKey, total := execs.snapshot()
	if total != keys || len(perKey) != keys {
		t.Errorf("upstream executions = %d over %d keys; want %d, one per key", total, len(perKey), keys)
	}
	bad := 0
	for k := range keys {
		key := fmt.Sprintf("dup-%03d", k)
		if n := perKey[key]; n != 1 && bad < 10 {
			bad++
			t.Errorf("key %s executed %d times; want 1", key, n)
		}
		first := answers[k][0]
		for d, a := range answers[k] {
			if (a.err != nil || a.status != http.StatusCreated || a.body != first.body) && bad < 10 {
				bad++
				t.Errorf("key %s duplicate %d (replica %d) = %v; want 201 %s", key, d, d%2, a, first.body)
			}
		}
		if !strings.Contains(first.body, fmt.Sprintf(`"key":%q,"exec":1,`, key)) && bad < 10 {
			bad++
			t.Errorf("key %s answer = %s; want the first execution's", key, first.body)
		}
	}
}

// e2eHangingUpstream answers POST /pay: the first execution of each key
// hangs until release is closed (or its client goes away); later ones
// answer at once. arrived receives the key of every first execution.
func e2eHangingUpstream(t *testing.T, execs *execCounter) (up *httptest.Server, arrived chan string, release chan struct{}) {
	arrived = make(chan string, 16)
	release = make(chan struct{})
	up = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		n, _ := execs.add(key)
		io.Copy(io.Discard, r.Body)
		if n == 1 {
			arrived <- key
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"exec":%d,"at":%d}`, key, n, time.Now().UnixNano())
	}))
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			select {
			case <-release:
			default:
				close(release)
			}
		})
		up.Close()
	})
	return up, arrived, release
}

func waitArrived(t *testing.T, arrived <-chan string, want string) {
	t.Helper()
	select {
	case k := <-arrived:
		if k != want {
			t.Fatalf("upstream got key %q; want %q", k, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("request with key %q did not reach the upstream within 10s", want)
	}
}

// takeOver retries key through base until it is no longer 409 in progress
// (bounded: 50 ms pauses, 10 s). It reports how many 409s it saw.
func takeOver(t *testing.T, c *http.Client, base, key, body string) (e2eAnswer, int, time.Duration) {
	t.Helper()
	start := time.Now()
	conflicts := 0
	for i := 0; i < 200 && time.Since(start) < 10*time.Second; i++ {
		a := post(c, base, key, body)
		if !a.inProgress() {
			return a, conflicts, time.Since(start)
		}
		if ra := a.header.Get("Retry-After"); ra != "2" {
			t.Errorf("409 in progress with Retry-After %q; want 2", ra)
		}
		conflicts++
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("key %q still in progress after %v (%d tries)", key, time.Since(start), conflicts)
	return e2eAnswer{}, conflicts, 0
}

// replayed retries key through base while it is 409 in progress (bounded:
// 20 ms pauses, 5 s): the proxy stores an answer just after sending it, so
// a retry right after an answer may still find the key in progress.
func replayed(c *http.Client, base, key, body string) e2eAnswer {
	start := time.Now()
	a := post(c, base, key, body)
	for i := 0; i < 250 && a.inProgress() && time.Since(start) < 5*time.Second; i++ {
		time.Sleep(20 * time.Millisecond)
		a = post(c, base, key, body)
	}
	return a
}

// idemgateBinary returns $IDEMGATE_BIN (make test builds bin/idemgate once
// for every suite that runs the binary and sets it), or builds this package
// into dir.
func idemgateBinary(t *testing.T, dir string) string {
	t.Helper()
	if p := os.Getenv("IDEMGATE_BIN"); p != "" {
		return p
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build the binary: %v", err)
	}
	bin := filepath.Join(dir, "idemgate")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/idemgate/idemgate/cmd/idemgate").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// freeAddr returns a loopback address nobody listens on right now, never
// the same twice (testutil.DeadAddr).
func freeAddr(t *testing.T) string { return testutil.DeadAddr(t) }

// TestRedisE2ECrashTakeover: an idemgate process is killed with SIGKILL
// while its keyed request hangs at the upstream; a retry through a second
// replica gets 409 in progress while the lease lives, then takes over and
// runs the request once more, and its answer is replayed afterwards.
func TestRedisE2ECrashTakeover(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	dir := t.TempDir()
	bin := idemgateBinary(t, dir)

	var execs execCounter
	up, arrived, _ := e2eHangingUpstream(t, &execs)
	prefix := e2ePrefix(t)
	// A lease of 3 s: B's first retry must come while A's claim still
	// holds, also on a loaded machine (1 s was not: a run beside other
	// race tests at load 15 let it lapse before the retry).
	const lease = 3 * time.Second
	extra := "idempotency: {lease: 3s}\n"
	pubA, adminA := testutil.DeadAddr(t), testutil.DeadAddr(t)
	cfgPath := filepath.Join(dir, "a.yaml")
	yamlA := e2eYAML(up.URL, addr, prefix, extra) + "listen: " + pubA + "\nadmin_listen: " + adminA + "\n"
	if err := os.WriteFile(cfgPath, []byte(yamlA), 0o600); err != nil {
		t.Fatal(err)
	}
	var logA syncBuffer
	cmd := exec.Command(bin, "--config", cfgPath, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = &logA, &logA
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			<-waited
		}
	})
	c := e2eClient(t)
	ready := false
	for i := 0; i < 200 && !ready; i++ {
		if res, err := c.Get("http://" + adminA + "/readyz"); err == nil {
			ready = res.StatusCode == http.StatusOK
			res.Body.Close()
		}
		if !ready {
			time.Sleep(25 * time.Millisecond)
		}
	}
	if !ready {
		t.Fatalf("idemgate process A not ready within 5s:\n%s", logA.String())
	}
	baseA := "http://" + pubA
	baseB := startReplica(t, e2eConfig(t, e2eYAML(up.URL, addr, prefix, extra)))

	const key, body = "crash-1", `{"amount":100}`
	resA := make(chan e2eAnswer, 1)
	go func() { resA <- post(c, baseA, key, body) }()
	waitArrived(t, arrived, key)

	// kill -9 A while its request hangs at the upstream.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed = true
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("process A did not exit after SIGKILL")
	}
	killedAt := time.Now()
	if a := <-resA; a.err == nil {
		t.Errorf("request through the killed process = %v; want a broken connection", a)
	}

	first := post(c, baseB, key, body)
	if !first.inProgress() {
		t.Fatalf("retry through B right after the crash = %v; want 409 idempotency_in_progress", first)
	}
	a, conflicts, waitedFor := takeOver(t, c, baseB, key, body)
	sinceKill := time.Since(killedAt)
	t.Logf("B took over %v after the kill, after %d more 409s", sinceKill.Round(time.Millisecond), conflicts)
	if a.err != nil || a.status != http.StatusCreated || !strings.Contains(a.body, `"exec":2,`) {
		t.Fatalf("takeover through B = %v; want 201 from the second execution", a)
	}
	if a.header.Get("Idempotent-Replayed") == "true" {
		t.Errorf("takeover answer marked as a replay")
	}
	if waitedFor > lease+3*time.Second || sinceKill > lease+3*time.Second {
		t.Errorf("takeover took %v after the kill; want about the lease (%v)", sinceKill, lease)
	}
	if n := execs.get(key); n != 2 {
		t.Errorf("upstream executions for %s = %d; want 2 (A's, then B's takeover)", key, n)
	}
	again := replayed(c, baseB, key, body)
	if again.err != nil || again.status != http.StatusCreated || again.body != a.body || again.header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("retry after the takeover = %v (replayed %q); want a replay of %s", again, again.header.Get("Idempotent-Replayed"), a.body)
	}
	if n := execs.get(key); n != 2 {
		t.Errorf("upstream executions for %s after the replay = %d; want 2", key, n)
	}
}

// TestRedisE2ELateCompletionFenced: replica A's request outlives its lease
// (max_lease = lease = 1s, as if A were frozen); B takes over and runs it
// again; when A's upstream call finally returns, A's completion carries a
// stale fencing token and must not replace B's stored answer.
func TestRedisE2ELateCompletionFenced(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	var execs execCounter
	up, arrived, release := e2eHangingUpstream(t, &execs)
	// A lease of 3 s: B's first retry must come while A still holds it,
	// also on a loaded CI (1 s was not always enough).
	yaml := e2eYAML(up.URL, addr, e2ePrefix(t), "idempotency: {lease: 3s, max_lease: 3s}\n")
	// Validate refuses this config on purpose (upstream.timeout exceeds
	// max_lease: exactly the frozen replica this test plays), so it is only
	// parsed.
	cfg, err := config.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); !errors.Is(err, config.ErrRange) {
		t.Fatalf("Validate = %v; want the timeout refused", err)
	}
	baseA := startReplica(t, cfg)
	cfgB, _ := config.Parse([]byte(yaml))
	baseB := startReplica(t, cfgB)
	c := e2eClient(t)

	const key, body = "late-1", `{"amount":7}`
	resA := make(chan e2eAnswer, 1)
	go func() { resA <- post(c, baseA, key, body) }()
	waitArrived(t, arrived, key)

	first := post(c, baseB, key, body)
	if !first.inProgress() {
		t.Fatalf("retry through B while A holds the lease = %v; want 409 idempotency_in_progress", first)
	}
	b, conflicts, took := takeOver(t, c, baseB, key, body)
	t.Logf("B took over after %v (%d more 409s)", took.Round(time.Millisecond), conflicts)
	if b.err != nil || b.status != http.StatusCreated || !strings.Contains(b.body, `"exec":2,`) {
		t.Fatalf("takeover through B = %v; want 201 from the second execution", b)
	}

	// A's upstream call returns now; its completion must be refused.
	close(release)
	var a e2eAnswer
	select {
	case a = <-resA:
	case <-time.After(15 * time.Second):
		t.Fatal("A's request did not finish within 15s of its upstream answering")
	}
	t.Logf("A's late answer to its own client: %v", a)

	for _, base := range []string{baseA, baseB} {
		r := replayed(c, base, key, body)
		if r.err != nil || r.status != http.StatusCreated || r.body != b.body || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("retry through %s after A's late completion = %v (replayed %q); want a replay of B's answer %s",
				base, r, r.header.Get("Idempotent-Replayed"), b.body)
		}
	}
	if n := execs.get(key); n != 2 {
		t.Errorf("upstream executions for %s = %d; want 2", key, n)
	}
}

// TestRedisE2EOutage: with a Redis that refuses connections a keyed write
// gets 503 idempotency_unavailable quickly and is not forwarded; an
// unkeyed write to the same route passes. Needs no real Redis.
func TestRedisE2EOutage(t *testing.T) {
	t.Parallel()
	var execs execCounter
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		execs.add(r.Header.Get("Idempotency-Key"))
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	dead := testutil.DeadAddr(t) // listened on, then closed: connections are refused
	yaml := e2eYAML(up.URL, dead, e2ePrefix(t), "")
	bases := []string{startReplica(t, e2eConfig(t, yaml)), startReplica(t, e2eConfig(t, yaml))}
	c := e2eClient(t)
	for i, base := range bases {
		start := time.Now()
		a := post(c, base, fmt.Sprint("outage-", i), `{}`)
		took := time.Since(start)
		if a.err != nil || a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, `"idempotency_unavailable"`) {
			t.Errorf("replica %d: keyed write with Redis down = %v; want 503 idempotency_unavailable", i, a)
		} else if ra := a.header.Get("Retry-After"); ra != "1" {
			t.Errorf("replica %d: 503 Retry-After = %q; want 1", i, ra)
		}
		if took > 2*time.Second {
			t.Errorf("replica %d: keyed write with Redis down took %v; want well within 2s", i, took)
		}
		t.Logf("replica %d: 503 after %v", i, took.Round(time.Millisecond))
		u := post(c, base, "", `{}`)
		if u.err != nil || u.status != http.StatusCreated || u.body != `{"ok":true}` {
			t.Errorf("replica %d: unkeyed write with Redis down = %v; want 201 from the upstream", i, u)
		}
	}
	perKey, total := execs.snapshot()
	if total != len(bases) || perKey[""] != len(bases) {
		t.Errorf("upstream executions = %v (total %d); want only the %d unkeyed writes", perKey, total, len(bases))
	}
}

// TestRedisE2EOutageRecovery: Redis goes away mid-run → keyed writes get
// 503 idempotency_unavailable within the timeout and unkeyed ones pass;
// it comes back → keyed writes work again on both replicas, no restart.
func TestRedisE2EOutageRecovery(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	g := testutil.NewGate(t, addr)
	var execs execCounter
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := execs.add(r.Header.Get("Idempotency-Key"))
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"exec":%d}`, n)
	}))
	defer up.Close()
	yaml := e2eYAML(up.URL, g.Addr(), e2ePrefix(t), "")
	bases := []string{startReplica(t, e2eConfig(t, yaml)), startReplica(t, e2eConfig(t, yaml))}
	c := e2eClient(t)

	for i, base := range bases {
		if a := post(c, base, fmt.Sprint("before-", i), `{}`); a.err != nil || a.status != http.StatusCreated {
			t.Fatalf("replica %d: keyed write with Redis up = %v; want 201", i, a)
		}
		// Its answer is stored (just after it was sent) before Redis goes.
		if r := replayed(c, bases[1-i], fmt.Sprint("before-", i), `{}`); r.err != nil || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replica %d: replay with Redis up = %v; want a replay", 1-i, r)
		}
	}
	g.Shut()
	for i, base := range bases {
		start := time.Now()
		a := post(c, base, fmt.Sprint("during-", i), `{}`)
		took := time.Since(start)
		if a.err != nil || a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, `"idempotency_unavailable"`) {
			t.Errorf("replica %d: keyed write with Redis down = %v; want 503 idempotency_unavailable", i, a)
		}
		if took > 2*time.Second {
			t.Errorf("replica %d: keyed write with Redis down took %v; want well within 2s", i, took)
		}
		if u := post(c, base, "", `{}`); u.err != nil || u.status != http.StatusCreated {
			t.Errorf("replica %d: unkeyed write with Redis down = %v; want 201", i, u)
		}
	}
	g.Open()
	for i, base := range bases {
		var a e2eAnswer
		start := time.Now()
		for try := 0; try < 50 && time.Since(start) < 10*time.Second; try++ {
			if a = post(c, base, fmt.Sprint("after-", i), `{}`); a.err == nil && a.status == http.StatusCreated {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if a.err != nil || a.status != http.StatusCreated {
			t.Errorf("replica %d: keyed write after Redis came back = %v; want 201", i, a)
			continue
		}
		t.Logf("replica %d recovered after %v", i, time.Since(start).Round(time.Millisecond))
		if r := replayed(c, bases[1-i], fmt.Sprint("after-", i), `{}`); r.err != nil || r.status != http.StatusCreated || r.body != a.body {
			t.Errorf("replay through the other replica = %v; want %s", r, a.body)
		}
	}
	if n := execs.get("during-0") + execs.get("during-1"); n != 0 {
		t.Errorf("%d keyed writes reached the upstream while Redis was down; want 0", n)
	}
}
