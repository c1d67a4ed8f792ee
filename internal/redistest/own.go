package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
// child process on a free loopback port, so that a test may flush, pause or
// kill it without touching the servers other tests share. Only this process
// is ever signalled, by PID.
type Own struct {
	Addr string
	t    testing.TB
	dir  string
	mu   sync.Mutex // protects cmd and exited
	cmd  *exec.Cmd
	// exited is closed when cmd has been reaped.
	exited chan struct{}
}

// ownTries bounds how often StartOwn picks another port when the free one
// it picked was taken before redis-server bound it.
const ownTries = 5

// errTaken is start's error when another process has the port.
var errTaken = errors.New("port taken")

// StartOwn starts an Own server on a free loopback port, or skips t (fails
// it under IDEMGATE_REQUIRE_REDIS=1) without the test servers. It is killed
// when t ends.
func StartOwn(t testing.TB) *Own {
	t.Helper()
	Addr(t) // skips or fails without the test servers (and redis-server)
	r := &Own{t: t, dir: t.TempDir()}
	t.Cleanup(r.Kill)
	for try := 1; ; try++ {
		r.Addr = freeAddr(t)
		err := r.start()
		if err == nil {
			return r
		}
		if !errors.Is(err, errTaken) || try == ownTries {
			t.Fatalf("own redis-server: %v", err)
		}
	}
}

// freeAddr returns a loopback address that was free a moment ago: listened
// on at port 0, then closed.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Start runs redis-server again, after Kill, on the same address, and
// waits, bounded, until it answers.
func (r *Own) Start() {
	r.t.Helper()
	if err := r.start(); err != nil {
		r.t.Fatalf("own redis-server: %v", err)
	}
}

// start runs redis-server on r.Addr and waits, bounded, until it answers.
// It returns an error wrapping errTaken when another process has the port.
func (r *Own) start() error {
	_, port, _ := net.SplitHostPort(r.Addr)
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", r.dir, "--loglevel", "warning")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// Its own process group, so that Kill also ends the children it forks
	// (an AOF rewrite after CONFIG SET appendonly yes), which would go on
	// writing into the test's directory while it is removed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	r.mu.Lock()
	r.cmd, r.exited = cmd, exited
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
				r.Kill()
				return fmt.Errorf("%s: %w by another redis-server (pid %s)", r.Addr, errTaken, pid)
			}
			return nil
		}
		select {
		case <-exited:
			// Most likely it could not bind: the port was taken between
			// freeAddr and now.
			r.Kill()
			return fmt.Errorf("%s: redis-server exited (%w?): %s", r.Addr, errTaken, bytes.TrimSpace(out.Bytes()))
		default:
		}
		if time.Now().After(deadline) {
			r.Kill()
			return fmt.Errorf("%s did not answer: %v", r.Addr, err)
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
// group: no chance to save anything) and waits until it is reaped.
func (r *Own) Kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	r.cmd.Process.Signal(syscall.SIGCONT)
	syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL) // the group: the server and its children
	r.cmd.Process.Kill()
	<-r.exited
	r.cmd, r.exited = nil, nil
}
