package redistest

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Own is a redis-server of a test's own, without persistence, run as a
// child process on its own port (the standalone test server's port +
// offset), so that a test may flush, pause or kill it without touching the
// servers other tests share. Only this process is ever signalled, by PID.
type Own struct {
	Addr string
	t    testing.TB
	dir  string
	mu   sync.Mutex // protects cmd
	cmd  *exec.Cmd
}

// StartOwn starts an Own server on the standalone port + offset, or skips
// t (fails it under IDEMGATE_REQUIRE_REDIS=1) without the test servers. It
// is killed when t ends.
func StartOwn(t testing.TB, offset int) *Own {
	t.Helper()
	_, port, err := net.SplitHostPort(Addr(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	r := &Own{t: t, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(p+offset)), dir: t.TempDir()}
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// Start runs redis-server (again, after Kill) and waits, bounded, until it
// answers.
func (r *Own) Start() {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.Addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", r.dir, "--loglevel", "warning")
	// Its own process group, so that Kill also ends the children it forks
	// (an AOF rewrite after CONFIG SET appendonly yes), which would go on
	// writing into the test's directory while it is removed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("starting redis-server: %v", err)
	}
	r.mu.Lock()
	r.cmd = cmd
	r.mu.Unlock()
	c := r.Client()
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.InfoMap(context.Background(), "server").Result()
		if err == nil {
			// The server that answers must be ours: a server left on the
			// port (by a test binary that was killed) would take our
			// signals' place, and ours has exited on the taken port.
			if pid := info["Server"]["process_id"]; pid != strconv.Itoa(cmd.Process.Pid) {
				cmd.Process.Kill()
				cmd.Wait()
				r.t.Fatalf("own redis-server: %s is taken by another redis-server (pid %s), not ours (pid %d)", r.Addr, pid, cmd.Process.Pid)
			}
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("own redis-server on %s did not answer: %v", r.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client is a plain client of the server, for the test's own commands.
func (r *Own) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: r.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
}

// Signal sends sig (SIGSTOP, SIGCONT) to the server.
func (r *Own) Signal(sig syscall.Signal) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("signal %v to own redis-server: %v", sig, err)
	}
}

// Kill stops the server and the children it forked (SIGKILL to its process
// group: no chance to save anything) and reaps it.
func (r *Own) Kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGCONT)
	syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL) // the group: the server and its children
	r.cmd.Process.Kill()
	r.cmd.Wait()
	r.cmd = nil
}
