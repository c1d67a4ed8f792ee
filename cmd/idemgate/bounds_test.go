package main

// Issue 15 ("Bounded under hostile load"), proved through the binary: the
// listener, the server's limits, the body reader and the shutdown are the
// process's, as an operator runs it.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testutil"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// idemgateBin builds this command once per test process.
func idemgateBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "idemgate-bounds-test")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "idemgate")
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		if out, err := exec.Command(goTool, "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// freeAddr returns a loopback address nobody listens on right now, never
// the same twice (testutil.DeadAddr).
func freeAddr(t *testing.T) string { return testutil.DeadAddr(t) }

// proc is a running idemgate binary.
type proc struct {
	cmd    *exec.Cmd
	public string
	admin  string
	logs   *syncBuffer
	exited chan struct{} // closed when the process has exited
}

// startBin runs the binary with yaml (listen and admin_listen added) and
// args, and waits until it is ready. It is killed when the test ends.
func startBin(t *testing.T, yaml string, args ...string) *proc {
	t.Helper()
	bin := idemgateBin(t)
	pub, adm := freeAddr(t), freeAddr(t)
	cfgPath := filepath.Join(t.TempDir(), "idemgate.yaml")
	yaml += "\nlisten: " + pub + "\nadmin_listen: " + adm + "\n"
	if err := os.WriteFile(cfgPath, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &proc{public: pub, admin: adm, logs: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"--config", cfgPath, "--log-flush", "0"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("idemgate log:\n%s", p.logs.String())
		}
	})
	for i := 0; i < 400; i++ {
		res, err := http.Get("http://" + adm + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return p
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("idemgate not ready within 10s:\n%s", p.logs.String())
	return nil
}

// recorder is an upstream that answers 201 and remembers every request's
// path and headers.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	seen []*http.Request
}

func newRecorder(t *testing.T, delay time.Duration) *recorder {
	rec := &recorder{}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		rec.mu.Lock()
		rec.seen = append(rec.seen, r.Clone(context.Background()))
		rec.mu.Unlock()
		time.Sleep(delay)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"ok":true}`)
	}))
	t.Cleanup(rec.Close)
	return rec
}

func (rec *recorder) requests() []*http.Request {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]*http.Request(nil), rec.seen...)
}

func boundsYAML(upstream, extra string) string {
	return `upstream: {url: "` + upstream + `"}
edge_limit: {rate: 0}
routes:
  - {name: pay, method: POST, path: /pay, idempotent: true}
` + extra
}

// keyedPost sends one keyed write and returns its status.
func keyedPost(c *http.Client, base, key string) (int, error) {
	req, _ := http.NewRequest("POST", base+"/pay", strings.NewReader(`{"amount":1}`))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer bounds-client") // the identity (require_identity)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// 16 sockets announce 1 MiB keyed bodies and send one byte: other keyed
// writes keep succeeding meanwhile, and the slow ones get 408 after
// request_body_timeout.
func TestBinarySlowBodies(t *testing.T) {
	t.Parallel()
	up := newRecorder(t, 0)
	const timeout = 1500 * time.Millisecond
	p := startBin(t, boundsYAML(up.URL, "request_body_timeout: 1500ms\n"))
	type answer struct {
		status int
		after  time.Duration
		err    error
	}
	answers := make(chan answer, 16)
	start := time.Now()
	for i := range 16 {
		c, err := net.Dial("tcp", p.public)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: slow-%d\r\nAuthorization: Bearer slow\r\nContent-Type: application/json\r\nContent-Length: 1048576\r\n\r\n[", i)
		go func() {
			c.SetReadDeadline(time.Now().Add(20 * time.Second))
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			res.Body.Close()
			answers <- answer{status: res.StatusCode, after: time.Since(start)}
		}()
	}
	c := &http.Client{Timeout: 10 * time.Second}
	ok := 0
	for i := 0; time.Since(start) < timeout-300*time.Millisecond; i++ {
		st, err := keyedPost(c, "http://"+p.public, fmt.Sprint("fast-", i))
		if err != nil || st != http.StatusCreated {
			t.Fatalf("keyed write %d while 16 bodies stall = %d, %v; want 201", i, st, err)
		}
		ok++
	}
	if ok == 0 {
		t.Fatal("no keyed write was sent while the slow bodies stalled")
	}
	for range 16 {
		a := <-answers
		if a.err != nil || a.status != http.StatusRequestTimeout {
			t.Errorf("slow body = %d, %v; want 408", a.status, a.err)
			continue
		}
		if a.after < timeout-100*time.Millisecond || a.after > timeout+5*time.Second {
			t.Errorf("slow body answered %v after it started; want about request_body_timeout (%v)", a.after, timeout)
		}
	}
	for _, r := range up.requests() {
		if strings.HasPrefix(r.Header.Get("Idempotency-Key"), "slow-") {
			t.Errorf("a slow body reached the upstream: %s", r.Header.Get("Idempotency-Key"))
		}
	}
	t.Logf("%d keyed writes succeeded while 16 bodies stalled", ok)
}

// The connection-level bounds: 1 MB of headers → 431; Content-Length with
// Transfer-Encoding → Connection: close, and a request pipelined after it
// is never served; X-Real-IP from an untrusted peer never arrives upstream.
func TestBinaryConnectionBounds(t *testing.T) {
	t.Parallel()
	up := newRecorder(t, 0)
	p := startBin(t, boundsYAML(up.URL, ""))

	t.Run("1 MB of headers", func(t *testing.T) {
		c, err := net.Dial("tcp", p.public)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var head strings.Builder
		head.WriteString("POST /pay HTTP/1.1\r\nHost: x\r\nIdempotency-Key: big\r\n")
		for i := 0; head.Len() < 1_000_000; i++ {
			fmt.Fprintf(&head, "X-Filler-%d: %s\r\n", i, strings.Repeat("a", 40))
		}
		head.WriteString("Content-Length: 0\r\n\r\n")
		go io.WriteString(c, head.String()) // the server may stop reading
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("1 MB of headers = %d; want 431", res.StatusCode)
		}
	})

	t.Run("Content-Length with Transfer-Encoding", func(t *testing.T) {
		c, err := net.Dial("tcp", p.public)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "POST /conflict HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+
			"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if !res.Close {
			t.Errorf("CL+TE answer %d without Connection: close", res.StatusCode)
		}
		if b, err := br.ReadByte(); err == nil {
			t.Errorf("connection still open after the CL+TE answer (read %q)", b)
		}
		for _, r := range up.requests() {
			if r.URL.Path == "/smuggled" {
				t.Error("the request pipelined after CL+TE was served")
			}
			if _, ok := r.Header["Idemgate-Framing-Conflict"]; ok {
				t.Error("the framing marker reached the upstream")
			}
		}
	})

	t.Run("X-Real-IP from an untrusted peer", func(t *testing.T) {
		c := &http.Client{Timeout: 10 * time.Second}
		for _, key := range []string{"", "real-ip"} {
			req, _ := http.NewRequest("POST", "http://"+p.public+"/pay", strings.NewReader(`{}`))
			req.Header.Set("X-Real-IP", "203.0.113.9")
			req.Header.Set("True-Client-IP", "203.0.113.9")
			req.Header.Set("Forwarded", "for=203.0.113.9")
			req.Header.Set("X-Test", "real-ip"+key)
			if key != "" {
				req.Header.Set("Idempotency-Key", key)
				req.Header.Set("Authorization", "Bearer bounds-client")
			}
			res, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != 201 {
				t.Fatalf("key %q: %d; want 201", key, res.StatusCode)
			}
		}
		n := 0
		for _, r := range up.requests() {
			if !strings.HasPrefix(r.Header.Get("X-Test"), "real-ip") {
				continue
			}
			n++
			for _, h := range []string{"X-Real-Ip", "True-Client-Ip", "Forwarded"} {
				if v, ok := r.Header[h]; ok {
					t.Errorf("upstream got %s: %v from an untrusted peer", h, v)
				}
			}
			if xff := r.Header.Get("X-Forwarded-For"); xff != "127.0.0.1" {
				t.Errorf("X-Forwarded-For = %q; want the peer, 127.0.0.1", xff)
			}
		}
		if n != 2 {
			t.Errorf("upstream saw %d of the 2 requests", n)
		}
	})
}

// startRedis runs a redis-server of the test's own on addr, without
// persistence, and returns its process (killed when the test ends).
func startRedis(t *testing.T, port int) *os.Process {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skipf("no redis-server: %v", err)
	}
	dir := t.TempDir()
	cmd := exec.Command(path, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		<-exited
	})
	for i := 0; i < 200; i++ {
		select {
		case <-exited:
			t.Fatalf("redis-server on port %d exited (is the port taken?)", port)
		default:
		}
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			io.WriteString(c, "PING\r\n")
			c.SetReadDeadline(time.Now().Add(time.Second))
			b := make([]byte, 7)
			n, _ := io.ReadFull(c, b)
			c.Close()
			if string(b[:n]) == "+PONG\r\n" {
				time.Sleep(50 * time.Millisecond) // a server of someone else's: ours exits
				select {
				case <-exited:
					t.Fatalf("redis-server on port %d exited (is the port taken?)", port)
				default:
				}
				return cmd.Process
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("redis-server on port %d did not answer PING", port)
	return nil
}

// Shutdown ends within --grace even when Redis hangs (SIGSTOP) with keyed
// writes in flight whose answers cannot be stored: the background retries
// stop at the deadline, and the log counts what was abandoned.
func TestBinaryShutdownRedisStopped(t *testing.T) {
	// Not parallel: it times (samples) a separate process, and runs while
	// the package's parallel tests wait, with no other idemgate beside it.
	port := freeTCPPort(t)
	redis := startRedis(t, port)
	var arrived atomic.Int32
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		arrived.Add(1)
		<-release
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer up.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	const grace = 2 * time.Second
	p := startBin(t, boundsYAML(up.URL, `store:
  backend: redis
  redis: {addrs: ["127.0.0.1:`+strconv.Itoa(port)+`"], key_prefix: "bounds-shutdown:", timeout: 500ms}
idempotency: {lease: 60s}
`), "--grace", grace.String())
	const n = 5
	done := make(chan struct{}, n)
	c := &http.Client{Timeout: 30 * time.Second}
	for i := range n {
		go func() {
			keyedPost(c, "http://"+p.public, fmt.Sprint("stuck-", i))
			done <- struct{}{}
		}()
	}
	for i := 0; i < 400 && arrived.Load() < n; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if arrived.Load() < n {
		t.Fatalf("%d of %d keyed writes reached the upstream", arrived.Load(), n)
	}
	if err := redis.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	close(release) // the answers arrive; storing them hangs
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-time.After(grace + 10*time.Second):
		t.Fatalf("idemgate still running %v after SIGTERM with --grace %v", time.Since(start), grace)
	}
	took := time.Since(start)
	t.Logf("exited %v after SIGTERM (--grace %v)", took.Round(time.Millisecond), grace)
	if took > grace+time.Second {
		t.Errorf("exit took %v after SIGTERM; want within --grace + 1s (%v)", took, grace+time.Second)
	}
	logs := p.logs.String()
	if !strings.Contains(logs, "unstored_answers") && !strings.Contains(logs, "abandoned") {
		t.Errorf("log does not count what the shutdown abandoned:\n%s", logs)
	}
	for range n {
		<-done
	}
}

// freeTCPPort returns a loopback port nobody listens on right now.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
