package redisstorage_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore/redisstore"
	"github.com/idemgate/idemgate/tlsconf/redisstorage"
	"github.com/idemgate/idemgate/tlsconf/storagetest"
)

// options returns topo's client options, or skips (see redistest).
func options(t *testing.T, topo redistest.Topology) redisstore.ClientOptions {
	t.Helper()
	s := topo.Find(t)
	return redisstore.ClientOptions{Addrs: s.Addrs, MasterName: s.MasterName, ClusterMode: s.Cluster}
}

// standalone returns the standalone server's client options.
func standalone(t *testing.T) redisstore.ClientOptions { return options(t, redistest.Standalone) }

func newClient(t *testing.T, o redisstore.ClientOptions) redis.UniversalClient {
	t.Helper()
	o.Timeout = 2 * time.Second
	c, err := redisstore.NewClient(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// prefix is a key prefix no other test or run shares.
func prefix(t *testing.T) string {
	return fmt.Sprintf("idemgate-test:%s:%d:%d:", t.Name(), os.Getpid(), time.Now().UnixNano())
}

// open returns a Storage on its own client (as a second replica has), and
// closes both at the end of the test: the storage first.
func open(t *testing.T, o redisstore.ClientOptions, opts redisstorage.Options) *redisstorage.Storage {
	t.Helper()
	c := newClient(t, o)
	s, err := redisstorage.New(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs certmagic's Storage contract (the storagetest suite)
// on every available topology.
func TestConformance(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, topo redistest.Topology) {
		o := options(t, topo)
		storagetest.Run(t, func(t *testing.T) storagetest.Opener {
			opts := redisstorage.Options{KeyPrefix: prefix(t), LockTTL: 2 * time.Second, LockPoll: 10 * time.Millisecond}
			return func(t *testing.T) certmagic.Storage { return open(t, o, opts) }
		}, storagetest.Options{LockWait: 3 * time.Second})
	})
}

// TestLockLapsesWhenHolderDies: a holder whose process dies (here: its
// client closes without Unlock, so nothing refreshes the lock) loses the
// lock after LockTTL, and another replica takes it.
func TestLockLapsesWhenHolderDies(t *testing.T) {
	t.Parallel()
	o := standalone(t)
	opts := redisstorage.Options{KeyPrefix: prefix(t), LockTTL: 300 * time.Millisecond, LockPoll: 10 * time.Millisecond}
	c1 := newClient(t, o)
	s1, err := redisstorage.New(c1, opts)
	if err != nil {
		t.Fatal(err)
	}
	s2 := open(t, o, opts)
	ctx := t.Context()
	if err := s1.Lock(ctx, "issue_cert_x"); err != nil {
		t.Fatal(err)
	}
	c1.Close() // the holder "dies": no refresh, no unlock
	start := time.Now()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s2.Lock(lctx, "issue_cert_x"); err != nil {
		t.Fatalf("Lock after the holder died = %v", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("took the lock after %v; the dead holder's lock should live about LockTTL (300ms)", d)
	}
	s1.Close() // its release fails (client closed): best effort, no panic
	if err := s2.Unlock(ctx, "issue_cert_x"); err != nil {
		t.Errorf("Unlock = %v", err)
	}
}

// TestLockRefreshedWhileHeld: a live holder keeps its lock well past
// LockTTL. (A TTL of 600 ms, refreshed every 200 ms, leaves a loaded CI
// 400 ms for a refresh to land; 150 ms left it 100 ms, and it failed.)
func TestLockRefreshedWhileHeld(t *testing.T) {
	t.Parallel()
	o := standalone(t)
	opts := redisstorage.Options{KeyPrefix: prefix(t), LockTTL: 600 * time.Millisecond, LockPoll: 20 * time.Millisecond}
	s1, s2 := open(t, o, opts), open(t, o, opts)
	ctx := t.Context()
	if err := s1.Lock(ctx, "renew"); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(3 * opts.LockTTL)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for time.Now().Before(until) {
		if ok, err := s2.TryLock(ctx, "renew"); ok || err != nil {
			t.Fatalf("TryLock while held (refreshed) = %v, %v; want false, nil", ok, err)
		}
		<-tick.C
	}
	if err := s1.Unlock(ctx, "renew"); err != nil {
		t.Fatalf("Unlock after 3×TTL = %v; want nil", err)
	}
}

// TestUnlockAfterTakeover: a holder whose lock was taken over gets
// ErrLockLost from Unlock and does not delete the new holder's lock.
func TestUnlockAfterTakeover(t *testing.T) {
	t.Parallel()
	o := standalone(t)
	p := prefix(t)
	opts := redisstorage.Options{KeyPrefix: p, LockTTL: 5 * time.Second, LockPoll: 10 * time.Millisecond}
	s1, s2 := open(t, o, opts), open(t, o, opts)
	raw := newClient(t, o)
	ctx := t.Context()
	if err := s1.Lock(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	keys, err := raw.Keys(ctx, p+"*").Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("lock keys = %q, %v; want one", keys, err)
	}
	raw.Del(ctx, keys[0]) // the lock lapses behind s1's back
	if ok, err := s2.TryLock(ctx, "n"); !ok || err != nil {
		t.Fatalf("TryLock of the lapsed lock = %v, %v", ok, err)
	}
	if err := s1.Unlock(ctx, "n"); !errors.Is(err, redisstorage.ErrLockLost) {
		t.Errorf("Unlock of a lost lock = %v; want ErrLockLost", err)
	}
	if ok, _ := s1.TryLock(ctx, "n"); ok {
		t.Errorf("the old holder's Unlock released the new holder's lock")
	}
	if err := s2.Unlock(ctx, "n"); err != nil {
		t.Errorf("new holder's Unlock = %v", err)
	}
	if err := s2.Unlock(ctx, "n"); !errors.Is(err, redisstorage.ErrNotLocked) {
		t.Errorf("second Unlock = %v; want ErrNotLocked", err)
	}
}

// TestCloseReleasesLocks: Close gives held locks back at once.
func TestCloseReleasesLocks(t *testing.T) {
	t.Parallel()
	o := standalone(t)
	opts := redisstorage.Options{KeyPrefix: prefix(t), LockTTL: time.Minute}
	s1, s2 := open(t, o, opts), open(t, o, opts)
	ctx := t.Context()
	if err := s1.Lock(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if ok, err := s2.TryLock(ctx, "a"); !ok || err != nil {
		t.Errorf("TryLock after the holder closed = %v, %v; want true", ok, err)
	}
	if err := s1.Lock(ctx, "b"); !errors.Is(err, redisstorage.ErrClosed) {
		t.Errorf("Lock after Close = %v; want ErrClosed", err)
	}
	if err := s1.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

// TestKeysAreHashed: certmagic keys (host names from handshakes) never
// become Redis key names, and every key shares one Cluster hash tag.
func TestKeysAreHashed(t *testing.T) {
	t.Parallel()
	o := standalone(t)
	p := prefix(t)
	s := open(t, o, redisstorage.Options{KeyPrefix: p})
	ctx := t.Context()
	const secret = "certificates/ca/tenant-7.shop.example/tenant-7.shop.example.key"
	if err := s.Store(ctx, secret, []byte("k")); err != nil {
		t.Fatal(err)
	}
	if err := s.Lock(ctx, "issue_cert_tenant-7.shop.example"); err != nil {
		t.Fatal(err)
	}
	defer s.Unlock(ctx, "issue_cert_tenant-7.shop.example")
	keys, err := newClient(t, o).Keys(ctx, p+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3 {
		t.Errorf("keys = %q; want index, one value and one lock", keys)
	}
	for _, k := range keys {
		if strings.Contains(k, "tenant-7") {
			t.Errorf("Redis key %q contains a raw certmagic key or lock name", k)
		}
		if !strings.HasPrefix(k, p+"{certmagic}:") {
			t.Errorf("Redis key %q lacks the {certmagic} hash tag", k)
		}
	}
}

// TestContextAndOutage: a cancelled context and an unreachable Redis are
// errors, never fs.ErrNotExist (which would make certmagic order a new
// certificate during an outage).
func TestContextAndOutage(t *testing.T) {
	t.Parallel()
	o := standalone(t)
	s := open(t, o, redisstorage.Options{KeyPrefix: prefix(t)})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := s.Load(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Load with a cancelled context = %v; want context.Canceled", err)
	}
	if err := s.Lock(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with a cancelled context = %v; want context.Canceled", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{dead}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	down, err := redisstorage.New(c, redisstorage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	bg := t.Context()
	if _, err := down.Load(bg, "k"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load with Redis down = %v; want an error that is not fs.ErrNotExist", err)
	}
	if _, err := down.Stat(bg, "k"); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat with Redis down = %v; want an error that is not fs.ErrNotExist", err)
	}
	if _, err := down.List(bg, "k", true); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List with Redis down = %v; want an error that is not fs.ErrNotExist", err)
	}
	if err := down.Store(bg, "k", []byte("v")); err == nil {
		t.Errorf("Store with Redis down = nil; want an error")
	}
	if ok, err := down.TryLock(bg, "k"); ok || err == nil {
		t.Errorf("TryLock with Redis down = %v, %v; want false and an error", ok, err)
	}
}

// TestNewRefusesBracePrefix: a brace in KeyPrefix would move the keys' hash
// tag ({certmagic}), so New refuses it, as the other Redis packages do.
func TestNewRefusesBracePrefix(t *testing.T) {
	c, err := redisstore.NewClient(redisstore.ClientOptions{Addrs: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, prefix := range []string{"{a}:", "a}", "{"} {
		if s, err := redisstorage.New(c, redisstorage.Options{KeyPrefix: prefix}); err == nil {
			s.Close()
			t.Errorf("New with KeyPrefix %q = nil error; want the brace refused", prefix)
		}
	}
}
