package redistest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelAuth is the credentials an own sentinel requires: Password for
// its default user (requirepass), and User with UserPassword for an ACL
// user of its own, granted only what a client of the sentinels needs
// (docs/operations.md, The Redis ACL user): +sentinel +subscribe +ping
// and every channel.
type SentinelAuth struct {
	Password, User, UserPassword string
}

// StartOwnSentinel starts a redis-sentinel of the test's own on a free
// loopback port, monitoring master (an [Own] server's address) under the
// name masterName and requiring auth, and waits, bounded, until it names
// the master. It returns the sentinel's address; the sentinel is killed
// (its process group, by PID) when t ends. Like [StartOwn] it skips t
// without the test servers.
func StartOwnSentinel(t testing.TB, master, masterName string, auth SentinelAuth) string {
	t.Helper()
	Addr(t) // skips or fails without the test servers (and redis-sentinel)
	host, port, err := net.SplitHostPort(master)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	_, sport, _ := net.SplitHostPort(addr)
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("port %s\nbind 127.0.0.1\ndaemonize no\ndir %s\nloglevel warning\nrequirepass %s\nuser %s on >%s +sentinel +subscribe +ping &*\nsentinel monitor %s %s %s 1\n",
		sport, dir, auth.Password, auth.User, auth.UserPassword, masterName, host, port)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-sentinel", conf)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting redis-sentinel: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, Password: auth.Password, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := c.GetMasterAddrByName(context.Background(), masterName).Result()
		if err == nil && len(got) == 2 && net.JoinHostPort(got[0], got[1]) == master {
			return addr
		}
		select {
		case <-exited:
			t.Fatalf("redis-sentinel on %s exited: %s", addr, bytes.TrimSpace(out.Bytes()))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-sentinel on %s did not name %s: %v %v", addr, master, got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
