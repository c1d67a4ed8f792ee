// Package storagetest is a conformance suite for certmagic.Storage
// implementations, written from the contract in certmagic's storage.go and
// checked against certmagic's own FileStorage (this package's test), so
// that a Storage that passes behaves as certmagic expects: store, load,
// overwrite, delete (files and whole directories, missing keys), exists,
// stat, list (recursive and not), the component-wise prefix rule ("a" is
// a prefix of "a/b", not of "ab/c"), concurrent stores, and Lock: mutual
// exclusion across two Storage values over the same backend, release,
// independence of names, context cancellation while waiting, and TryLock
// when implemented.
package storagetest

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/certmagic"
)

// Opener opens a Storage on one backend namespace. Every Storage it opens
// sees the same data and the same locks (as two replicas would), and the
// namespace starts empty.
type Opener func(t *testing.T) certmagic.Storage

// Options tune [Run].
type Options struct {
	// LockWait bounds each wait for a lock that should become free: at
	// least the implementation's poll interval, with room to spare.
	// Default 10s.
	LockWait time.Duration
	// Lockers is how many goroutines (spread over two Storage values)
	// contend for one lock in the mutual-exclusion test; each takes it
	// twice. Default 6. A Storage that polls slowly (FileStorage: 1s) wants
	// fewer.
	Lockers int
}

// Run runs the suite. newNamespace is called once per subtest and returns
// the Opener of a fresh, empty namespace.
func Run(t *testing.T, newNamespace func(t *testing.T) Opener, opts Options) {
	if opts.LockWait <= 0 {
		opts.LockWait = 10 * time.Second
	}
	if opts.Lockers <= 0 {
		opts.Lockers = 6
	}
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener, opts Options)
	}{
		{"StoreLoad", testStoreLoad},
		{"LoadMissing", testLoadMissing},
		{"Overwrite", testOverwrite},
		{"Exists", testExists},
		{"Stat", testStat},
		{"List", testList},
		{"ListMissing", testListMissing},
		{"Delete", testDelete},
		{"DeleteDirectory", testDeleteDirectory},
		{"DeleteMissing", testDeleteMissing},
		{"PrefixIsComponentWise", testPrefixComponentWise},
		{"SharedBetweenInstances", testShared},
		{"ConcurrentStores", testConcurrentStores},
		{"LockExcludesOtherInstance", testLockExcludes},
		{"LockMutualExclusion", testLockMutualExclusion},
		{"LockNamesIndependent", testLockNamesIndependent},
		{"LockHonoursContext", testLockContext},
		{"TryLock", testTryLock},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newNamespace(t), opts)
		})
	}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func store(t *testing.T, s certmagic.Storage, kv ...string) {
	t.Helper()
	for i := 0; i+1 < len(kv); i += 2 {
		if err := s.Store(ctxFor(t), kv[i], []byte(kv[i+1])); err != nil {
			t.Fatalf("Store(%q) = %v", kv[i], err)
		}
	}
}

func load(t *testing.T, s certmagic.Storage, key string) []byte {
	t.Helper()
	v, err := s.Load(ctxFor(t), key)
	if err != nil {
		t.Fatalf("Load(%q) = %v; want nil", key, err)
	}
	return v
}

func testStoreLoad(t *testing.T, open Opener, _ Options) {
	s := open(t)
	values := map[string][]byte{
		"certificates/acme/example.com/example.com.crt": []byte("-----BEGIN CERTIFICATE-----\n..."),
		"binary":       {0, 1, 2, 0xff, 0, '\n', '\r'},
		"empty":        {},
		"a/b/c/d/e/f":  bytes.Repeat([]byte("x"), 64<<10),
		"acme/x@y.z/k": []byte("account"),
	}
	for k, v := range values {
		if err := s.Store(ctxFor(t), k, v); err != nil {
			t.Fatalf("Store(%q) = %v", k, err)
		}
	}
	for k, want := range values {
		if got := load(t, s, k); !bytes.Equal(got, want) {
			t.Errorf("Load(%q) = %d bytes %q...; want the %d bytes stored", k, len(got), trunc(got), len(want))
		}
	}
}

func trunc(b []byte) []byte { return b[:min(len(b), 16)] }

func testLoadMissing(t *testing.T, open Opener, _ Options) {
	s := open(t)
	store(t, s, "dir/file", "v")
	for _, k := range []string{"missing", "dir/missing", "missing/deeper"} {
		if _, err := s.Load(ctxFor(t), k); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Load(%q) = %v; want an error wrapping fs.ErrNotExist", k, err)
		}
	}
}

func testOverwrite(t *testing.T, open Opener, _ Options) {
	s := open(t)
	store(t, s, "k", "first, and longer")
	store(t, s, "k", "second")
	if got := load(t, s, "k"); string(got) != "second" {
		t.Errorf("Load after overwrite = %q; want %q", got, "second")
	}
	info, err := s.Stat(ctxFor(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len("second")) {
		t.Errorf("Stat after overwrite: Size = %d; want %d", info.Size, len("second"))
	}
}

func testExists(t *testing.T, open Opener, _ Options) {
	s := open(t)
	store(t, s, "a/b/c", "v")
	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"a/b/c", true}, {"a/b", true}, {"a", true},
		{"a/x", false}, {"b", false}, {"a/c", false},
	} {
		if got := s.Exists(ctxFor(t), tc.key); got != tc.want {
			t.Errorf("Exists(%q) = %v; want %v", tc.key, got, tc.want)
		}
	}
}

func testStat(t *testing.T, open Opener, _ Options) {
	s := open(t)
	before := time.Now().Add(-2 * time.Second)
	store(t, s, "d/file", "12345")
	after := time.Now().Add(2 * time.Second)
	info, err := s.Stat(ctxFor(t), "d/file")
	if err != nil {
		t.Fatalf("Stat(file) = %v", err)
	}
	if info.Key != "d/file" || !info.IsTerminal || info.Size != 5 {
		t.Errorf("Stat(file) = %+v; want Key d/file, IsTerminal, Size 5", info)
	}
	if info.Modified.Before(before) || info.Modified.After(after) {
		t.Errorf("Stat(file).Modified = %v; want within [%v, %v]", info.Modified, before, after)
	}
	dir, err := s.Stat(ctxFor(t), "d")
	if err != nil {
		t.Fatalf("Stat(dir) = %v", err)
	}
	if dir.Key != "d" || dir.IsTerminal {
		t.Errorf("Stat(dir) = %+v; want Key d, not IsTerminal", dir)
	}
	if _, err := s.Stat(ctxFor(t), "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(missing) = %v; want an error wrapping fs.ErrNotExist", err)
	}
}

func testList(t *testing.T, open Opener, _ Options) {
	s := open(t)
	store(t, s,
		"certificates/ca/a.example/a.example.crt", "c",
		"certificates/ca/a.example/a.example.key", "k",
		"certificates/ca/b.example/b.example.crt", "c",
		"certificates/other/x/x.crt", "c",
		"acme/ca/users/u/u.json", "u",
		"top", "t",
	)
	for _, tc := range []struct {
		path      string
		recursive bool
		want      []string
	}{
		{"certificates", false, []string{"certificates/ca", "certificates/other"}},
		{"certificates/ca", false, []string{"certificates/ca/a.example", "certificates/ca/b.example"}},
		{"certificates/ca/a.example", false, []string{"certificates/ca/a.example/a.example.crt", "certificates/ca/a.example/a.example.key"}},
		{"certificates", true, []string{
			"certificates/ca", "certificates/ca/a.example",
			"certificates/ca/a.example/a.example.crt", "certificates/ca/a.example/a.example.key",
			"certificates/ca/b.example", "certificates/ca/b.example/b.example.crt",
			"certificates/other", "certificates/other/x", "certificates/other/x/x.crt",
		}},
		{"acme", true, []string{"acme/ca", "acme/ca/users", "acme/ca/users/u", "acme/ca/users/u/u.json"}},
	} {
		got, err := s.List(ctxFor(t), tc.path, tc.recursive)
		if err != nil {
			t.Errorf("List(%q, %v) = %v", tc.path, tc.recursive, err)
			continue
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("List(%q, %v) = %q; want %q", tc.path, tc.recursive, got, tc.want)
		}
	}
}

func testListMissing(t *testing.T, open Opener, _ Options) {
	s := open(t)
	store(t, s, "a/b", "v")
	if got, err := s.List(ctxFor(t), "nope", false); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List(missing) = %q, %v; want an error wrapping fs.ErrNotExist", got, err)
	}
	if got, err := s.List(ctxFor(t), "nope", true); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List(missing, recursive) = %q, %v; want an error wrapping fs.ErrNotExist", got, err)
	}
}

func testDelete(t *testing.T, open Opener, _ Options) {
	s := open(t)
	store(t, s, "d/one", "1", "d/two", "2")
	if err := s.Delete(ctxFor(t), "d/one"); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if s.Exists(ctxFor(t), "d/one") {
		t.Errorf("Exists after Delete = true")
	}
	if _, err := s.Load(ctxFor(t), "d/one"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load after Delete = %v; want fs.ErrNotExist", err)
	}
	if got := load(t, s, "d/two"); string(got) != "2" {
		t.Errorf("sibling after Delete = %q; want %q", got, "2")
	}
	got, err := s.List(ctxFor(t), "d", false)
	if err != nil || !slices.Equal(got, []string{"d/two"}) {
		t.Errorf("List after Delete = %q, %v; want [d/two]", got, err)
	}
}

func testDeleteDirectory(t *testing.T, open Opener, _ Options) {
	s := open(t)
	store(t, s, "d/a", "1", "d/sub/b", "2", "d/sub/deep/c", "3", "keep", "k", "dx/y", "k")
	if err := s.Delete(ctxFor(t), "d"); err != nil {
		t.Fatalf("Delete(dir) = %v", err)
	}
	for _, k := range []string{"d", "d/a", "d/sub", "d/sub/b", "d/sub/deep/c"} {
		if s.Exists(ctxFor(t), k) {
			t.Errorf("Exists(%q) after deleting its directory = true", k)
		}
	}
	for _, k := range []string{"keep", "dx/y"} {
		if !s.Exists(ctxFor(t), k) {
			t.Errorf("Exists(%q) = false; deleting \"d\" must not touch it", k)
		}
	}
}

func testDeleteMissing(t *testing.T, open Opener, _ Options) {
	s := open(t)
	for _, k := range []string{"never", "never/deeper"} {
		if err := s.Delete(ctxFor(t), k); err != nil {
			t.Errorf("Delete(%q) of a missing key = %v; want nil", k, err)
		}
	}
	store(t, s, "once", "v")
	for range 2 {
		if err := s.Delete(ctxFor(t), "once"); err != nil {
			t.Errorf("Delete twice = %v; want nil", err)
		}
	}
}

func testPrefixComponentWise(t *testing.T, open Opener, _ Options) {
	s := open(t)
	store(t, s, "ab/c", "v", "a-b", "w")
	if s.Exists(ctxFor(t), "a") {
		t.Errorf("Exists(a) = true with only ab/c and a-b stored")
	}
	if got, err := s.List(ctxFor(t), "a", true); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List(a) = %q, %v; want fs.ErrNotExist (ab/c is not under a)", got, err)
	}
	if err := s.Delete(ctxFor(t), "a"); err != nil {
		t.Fatal(err)
	}
	if !s.Exists(ctxFor(t), "ab/c") || !s.Exists(ctxFor(t), "a-b") {
		t.Errorf("Delete(a) removed ab/c or a-b")
	}
}

func testShared(t *testing.T, open Opener, _ Options) {
	s1, s2 := open(t), open(t)
	store(t, s1, "shared/k", "from one")
	if got := load(t, s2, "shared/k"); string(got) != "from one" {
		t.Errorf("second instance Load = %q; want %q", got, "from one")
	}
	if err := s2.Delete(ctxFor(t), "shared"); err != nil {
		t.Fatal(err)
	}
	if s1.Exists(ctxFor(t), "shared/k") {
		t.Errorf("first instance still sees a key the second deleted")
	}
}

func testConcurrentStores(t *testing.T, open Opener, _ Options) {
	s := open(t)
	const n = 16
	values := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		values[i] = bytes.Repeat([]byte{byte('a' + i)}, 4096+i)
		wg.Go(func() {
			if err := s.Store(ctxFor(t), "race", values[i]); err != nil {
				t.Errorf("Store = %v", err)
			}
		})
	}
	wg.Wait()
	got := load(t, s, "race")
	if !slices.ContainsFunc(values, func(v []byte) bool { return bytes.Equal(v, got) }) {
		t.Errorf("after concurrent Stores, Load = %d bytes starting %q; want one stored value, whole", len(got), trunc(got))
	}
}

func testLockExcludes(t *testing.T, open Opener, opts Options) {
	s1, s2 := open(t), open(t)
	ctx := ctxFor(t)
	if err := s1.Lock(ctx, "issue_cert_a.example"); err != nil {
		t.Fatalf("Lock = %v", err)
	}
	got := make(chan error, 1)
	go func() {
		err := s2.Lock(ctx, "issue_cert_a.example")
		got <- err
	}()
	// Held by s1: s2 must still be waiting after a few of its polls.
	select {
	case err := <-got:
		t.Fatalf("second instance's Lock returned %v while the first held the lock", err)
	case <-time.After(opts.LockWait / 10):
	}
	if err := s1.Unlock(ctx, "issue_cert_a.example"); err != nil {
		t.Fatalf("Unlock = %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("second instance's Lock after Unlock = %v", err)
		}
	case <-time.After(opts.LockWait):
		t.Fatalf("second instance did not get the lock within %v of its release", opts.LockWait)
	}
	if err := s2.Unlock(ctx, "issue_cert_a.example"); err != nil {
		t.Errorf("second Unlock = %v", err)
	}
}

func testLockMutualExclusion(t *testing.T, open Opener, opts Options) {
	storages := []certmagic.Storage{open(t), open(t)}
	ctx := ctxFor(t)
	var inside, maxInside, entries atomic.Int32
	var wg sync.WaitGroup
	for i := range opts.Lockers {
		s := storages[i%2]
		wg.Go(func() {
			for range 2 {
				if err := s.Lock(ctx, "renew_cert_m.example"); err != nil {
					t.Errorf("Lock = %v", err)
					return
				}
				n := inside.Add(1)
				for {
					m := maxInside.Load()
					if n <= m || maxInside.CompareAndSwap(m, n) {
						break
					}
				}
				entries.Add(1)
				for range 100 {
					runtime.Gosched() // hold it a moment: overlaps would show
				}
				inside.Add(-1)
				if err := s.Unlock(ctx, "renew_cert_m.example"); err != nil {
					t.Errorf("Unlock = %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if m := maxInside.Load(); m != 1 {
		t.Errorf("%d holders at once; want 1", m)
	}
	if e := entries.Load(); e != int32(2*opts.Lockers) {
		t.Errorf("%d critical sections ran; want %d", e, 2*opts.Lockers)
	}
}

func testLockNamesIndependent(t *testing.T, open Opener, opts Options) {
	s1, s2 := open(t), open(t)
	ctx, cancel := context.WithTimeout(ctxFor(t), opts.LockWait)
	defer cancel()
	if err := s1.Lock(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	defer s1.Unlock(context.Background(), "one")
	if err := s2.Lock(ctx, "two"); err != nil {
		t.Fatalf("Lock(two) while one is held = %v; want nil", err)
	}
	if err := s2.Unlock(ctx, "two"); err != nil {
		t.Error(err)
	}
}

func testLockContext(t *testing.T, open Opener, opts Options) {
	s1, s2 := open(t), open(t)
	if err := s1.Lock(ctxFor(t), "held"); err != nil {
		t.Fatal(err)
	}
	defer s1.Unlock(context.Background(), "held")
	ctx, cancel := context.WithTimeout(ctxFor(t), opts.LockWait/10)
	defer cancel()
	start := time.Now()
	err := s2.Lock(ctx, "held")
	if err == nil {
		s2.Unlock(context.Background(), "held")
		t.Fatalf("Lock of a held lock with an expiring context = nil; want an error")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Logf("Lock with an expired context = %v (not wrapping context.DeadlineExceeded)", err)
	}
	if d := time.Since(start); d > opts.LockWait {
		t.Errorf("Lock returned %v after its context ended; want promptly", d)
	}
}

func testTryLock(t *testing.T, open Opener, _ Options) {
	s1, s2 := open(t), open(t)
	t1, ok1 := s1.(certmagic.TryLocker)
	t2, ok2 := s2.(certmagic.TryLocker)
	if !ok1 || !ok2 {
		t.Skip("not a certmagic.TryLocker")
	}
	ctx := ctxFor(t)
	if ok, err := t1.TryLock(ctx, "ari_x"); !ok || err != nil {
		t.Fatalf("TryLock of a free lock = %v, %v; want true, nil", ok, err)
	}
	if ok, err := t2.TryLock(ctx, "ari_x"); ok || err != nil {
		t.Fatalf("TryLock of a held lock = %v, %v; want false, nil", ok, err)
	}
	if err := t1.Unlock(ctx, "ari_x"); err != nil {
		t.Fatal(err)
	}
	if ok, err := t2.TryLock(ctx, "ari_x"); !ok || err != nil {
		t.Fatalf("TryLock after release = %v, %v; want true, nil", ok, err)
	}
	if err := t2.Unlock(ctx, "ari_x"); err != nil {
		t.Error(err)
	}
}
