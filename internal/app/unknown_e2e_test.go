package app

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/internal/testutil"
)

// holdYAML is e2eYAML's replica on unknown_outcome: hold.
func holdYAML(upstream, redisAddr, prefix, extra string) string {
	return strings.Replace(e2eYAML(upstream, redisAddr, prefix, extra),
		"idempotent: true}", "idempotent: true, unknown_outcome: hold}", 1)
}

// outcomeUnknown reports whether a is 409 idempotency_outcome_unknown.
func (a e2eAnswer) outcomeUnknown() bool {
	return a.err == nil && a.status == http.StatusConflict && strings.Contains(a.body, `"idempotency_outcome_unknown"`)
}

// TestUnknownHoldE2EBroken (issue 26, Proof): on a hold route, a write whose
// connection broke after it was sent through replica A is held: its retry
// through replica B gets 409 idempotency_outcome_unknown, without
// Retry-After, and nothing runs again.
func TestUnknownHoldE2EBroken(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	var execs execCounter
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		execs.add(r.Header.Get("Idempotency-Key"))
		io.Copy(io.Discard, r.Body)
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close() // ran, then the connection broke
		}
	}))
	t.Cleanup(up.Close)
	prefix := e2ePrefix(t)
	a := startReplica(t, e2eConfig(t, holdYAML(up.URL, addr, prefix, "")))
	b := startReplica(t, e2eConfig(t, holdYAML(up.URL, addr, prefix, "")))
	c := e2eClient(t)
	if first := post(c, a, "broken-1", `{"amount":1}`); first.err != nil || first.status != http.StatusBadGateway {
		t.Fatalf("first through A = %v; want 502 upstream_broken", first)
	}
	for i := range 3 {
		r := post(c, b, "broken-1", `{"amount":1}`)
		if !r.outcomeUnknown() || r.header.Get("Retry-After") != "" {
			t.Fatalf("retry %d through B = %v (Retry-After %q); want 409 idempotency_outcome_unknown without Retry-After", i, r, r.header.Get("Retry-After"))
		}
	}
	if n := execs.get("broken-1"); n != 1 {
		t.Errorf("executions = %d; want 1", n)
	}
}

// TestUnknownHoldE2ECrash (issue 26, Proof): replica A, a real process, is
// SIGKILLed while its request, sent upstream, hangs there. On a hold route
// its lapsed claim becomes unknown, never taken over: every retry through
// replica B gets 409 in progress until the lease ends, then 409
// idempotency_outcome_unknown, and the write ran once. (The same crash on a
// takeover route runs it twice: TestRedisE2ECrashTakeover.)
func TestUnknownHoldE2ECrash(t *testing.T) {
	t.Parallel()
	addr := redistest.Addr(t)
	dir := t.TempDir()
	bin := idemgateBinary(t, dir)
	var execs execCounter
	up, arrived, _ := e2eHangingUpstream(t, &execs)
	prefix := e2ePrefix(t)
	const lease = time.Second
	extra := "idempotency: {lease: 1s}\n"
	pubA, adminA := testutil.DeadAddr(t), testutil.DeadAddr(t)
	cfgPath := filepath.Join(dir, "a.yaml")
	yamlA := holdYAML(up.URL, addr, prefix, extra) + "listen: " + pubA + "\nadmin_listen: " + adminA + "\n"
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
	for i := 0; i < 400 && !ready; i++ {
		if res, err := c.Get("http://" + adminA + "/readyz"); err == nil {
			ready = res.StatusCode == http.StatusOK
			res.Body.Close()
		}
		if !ready {
			time.Sleep(25 * time.Millisecond)
		}
	}
	if !ready {
		t.Fatalf("idemgate process A not ready within 10s:\n%s", logA.String())
	}
	baseB := startReplica(t, e2eConfig(t, holdYAML(up.URL, addr, prefix, extra)))

	const key, body = "crash-hold-1", `{"amount":100}`
	resA := make(chan e2eAnswer, 1)
	go func() { resA <- post(c, "http://"+pubA, key, body) }()
	waitArrived(t, arrived, key)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed = true
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		t.Fatal("process A did not exit after SIGKILL")
	}
	<-resA
	// Retry through B until the lapsed claim is found (bounded: 50 ms
	// pauses, 15 s): nothing but 409s, and at last the unknown one.
	start := time.Now()
	var last e2eAnswer
	for i := 0; i < 300 && time.Since(start) < 15*time.Second; i++ {
		last = post(c, baseB, key, body)
		if !last.inProgress() {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !last.outcomeUnknown() {
		t.Fatalf("retry through B after A's lease (%v) = %v; want 409 idempotency_outcome_unknown", lease, last)
	}
	if again := post(c, baseB, key, body); !again.outcomeUnknown() {
		t.Errorf("next retry = %v; want 409 idempotency_outcome_unknown", again)
	}
	if n := execs.get(key); n != 1 {
		t.Errorf("upstream executions = %d; want 1", n)
	}
}

// TestUnknownHoldE2ELoadKill (issue 26, Proof): 200 keys × 20 duplicates
// over two replicas on a hold route, while the upstream answers 1–3 s past
// the route's 1 s timeout and replica A, a real process, is SIGKILLed in
// the middle: no key runs twice. Kept calls record their late answers;
// A's sent claims become unknown; claims A never sent are taken over. (On
// takeover, the same run executed 100 of the 200 keys twice.)
func TestUnknownHoldE2ELoadKill(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a load test")
	}
	addr := redistest.Addr(t)
	dir := t.TempDir()
	bin := idemgateBinary(t, dir)
	var execs execCounter
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		execs.add(key)
		io.Copy(io.Discard, r.Body)
		late := 2*time.Second + time.Duration(len(key)*37%20)*100*time.Millisecond // 1–3 s past the timeout
		select {
		case <-time.After(late):
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"key":"`+key+`"}`)
	}))
	t.Cleanup(up.Close)
	prefix := e2ePrefix(t)
	extra := "idempotency: {lease: 1s, late_answer_wait: 10s}\n"
	yaml := strings.Replace(holdYAML(up.URL, addr, prefix, extra), "unknown_outcome: hold}", "unknown_outcome: hold, timeout: 1s}", 1)
	pubA, adminA := testutil.DeadAddr(t), testutil.DeadAddr(t)
	cfgPath := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(cfgPath, []byte(yaml+"listen: "+pubA+"\nadmin_listen: "+adminA+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfgPath, "--log-level", "error")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var killOnce sync.Once
	kill := func() {
		killOnce.Do(func() {
			cmd.Process.Kill()
			<-waited
		})
	}
	t.Cleanup(kill)
	c := e2eClient(t)
	ready := false
	for i := 0; i < 400 && !ready; i++ {
		if res, err := c.Get("http://" + adminA + "/readyz"); err == nil {
			ready = res.StatusCode == http.StatusOK
			res.Body.Close()
		}
		if !ready {
			time.Sleep(25 * time.Millisecond)
		}
	}
	if !ready {
		t.Fatal("idemgate process A not ready within 10s")
	}
	bases := []string{"http://" + pubA, startReplica(t, e2eConfig(t, yaml))}
	const keys, dups = 200, 20
	go func() {
		time.Sleep(1500 * time.Millisecond) // mid-flight: A holds sent and kept calls
		kill()
	}()
	var wg sync.WaitGroup
	for k := range keys {
		wg.Go(func() {
			key := fmt.Sprintf("load-%03d", k)
			for d := range dups {
				post(c, bases[(k+d)%2], key, `{"n":1}`)
				time.Sleep(time.Duration(50+k%50) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	counts, total := execs.snapshot()
	twice := 0
	for key, n := range counts {
		if n > 1 {
			twice++
			t.Errorf("key %s ran %d times", key, n)
		}
	}
	t.Logf("%d keys ran, %d executions, %d twice", len(counts), total, twice)
}
