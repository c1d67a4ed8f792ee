package config

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// delivery is one call of Watch's callback.
type delivery struct {
	data string
	err  error
}

// startWatch runs Watch on path until the test ends and returns its
// deliveries and the channel that forces a read.
func startWatch(t *testing.T, path string) (<-chan delivery, chan<- struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan delivery, 32)
	reload := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, path, WatchOptions{Debounce: 20 * time.Millisecond, Poll: -1, Reload: reload}, func(data []byte, err error) {
			got <- delivery{string(data), err}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch = %v", err)
		}
	})
	return got, reload
}

// next waits (bounded) for the next delivery.
func next(t *testing.T, got <-chan delivery, what string) delivery {
	t.Helper()
	select {
	case d := <-got:
		return d
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no delivery within 10s", what)
		return delivery{}
	}
}

// expectData waits for a delivery of want.
func expectData(t *testing.T, got <-chan delivery, want, what string) {
	t.Helper()
	if d := next(t, got, what); d.err != nil || d.data != want {
		t.Fatalf("%s: delivered %q, %v; want %q", what, d.data, d.err, want)
	}
}

// expectWritten waits for a delivery of want after a write in place: the
// watcher may also have read the file between the truncation and the write
// (a slow writer), so empty deliveries before it are allowed.
func expectWritten(t *testing.T, got <-chan delivery, want, what string) {
	t.Helper()
	for {
		d := next(t, got, what)
		if d.err == nil && d.data == "" {
			continue
		}
		if d.err != nil || d.data != want {
			t.Fatalf("%s: delivered %q, %v; want %q", what, d.data, d.err, want)
		}
		return
	}
}

// expectNone checks that nothing is delivered for a while.
func expectNone(t *testing.T, got <-chan delivery, what string) {
	t.Helper()
	select {
	case d := <-got:
		t.Fatalf("%s: delivered %q, %v; want nothing", what, d.data, d.err)
	case <-time.After(200 * time.Millisecond):
	}
}

func mustWrite(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// configMapUpdate reproduces the kubelet's AtomicWriter: the data goes into
// a new timestamped directory, a ..data_tmp symlink to it is renamed over
// ..data, and the old directory is removed.
func configMapUpdate(t *testing.T, dir string, gen int, data string) {
	t.Helper()
	ts := fmt.Sprintf("..2026_11_30_12_00_%02d.%d", gen, 100000+gen)
	if err := os.Mkdir(filepath.Join(dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(dir, ts, "config.yaml"), data)
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(ts, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWatchConfigMap: the mounted file is a symlink through ..data; each
// update swaps ..data to a new timestamped directory.
func TestWatchConfigMap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	configMapUpdate(t, dir, 1, "v1")
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), filepath.Join(dir, "config.yaml")); err != nil {
		t.Fatal(err)
	}
	got, _ := startWatch(t, filepath.Join(dir, "config.yaml"))
	expectData(t, got, "v1", "start")
	for gen := 2; gen <= 4; gen++ {
		configMapUpdate(t, dir, gen, fmt.Sprintf("v%d", gen))
		expectData(t, got, fmt.Sprintf("v%d", gen), fmt.Sprintf("ConfigMap update %d", gen))
	}
	expectNone(t, got, "after the updates")
}

// TestWatchReplace: a rename over the file and a write in place are both
// seen; unchanged content is not delivered again unless forced; a missing
// file is reported once.
func TestWatchReplace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "idemgate.yaml")
	mustWrite(t, path, "a")
	got, reload := startWatch(t, path)
	expectData(t, got, "a", "start")

	tmp := filepath.Join(dir, ".idemgate.yaml.tmp")
	mustWrite(t, tmp, "b")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	expectData(t, got, "b", "rename-over")

	mustWrite(t, path, "c") // in place: truncate, then write
	expectWritten(t, got, "c", "in-place write")

	mustWrite(t, tmp, "c")
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	expectNone(t, got, "same content again")
	reload <- struct{}{}
	expectData(t, got, "c", "forced read")

	mustWrite(t, filepath.Join(dir, "unrelated.log"), "x")
	expectNone(t, got, "another file in the directory")

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if d := next(t, got, "removed"); d.err == nil {
		t.Fatalf("removed file: delivered %q; want an error", d.data)
	}
	mustWrite(t, path, "d")
	expectWritten(t, got, "d", "recreated")
}

// TestWatchSymlinkElsewhere: a file that is a symlink to a file in another
// directory is followed there for writes in place.
func TestWatchSymlinkElsewhere(t *testing.T) {
	t.Parallel()
	mount, real := t.TempDir(), t.TempDir()
	mustWrite(t, filepath.Join(real, "real.yaml"), "1")
	path := filepath.Join(mount, "config.yaml")
	if err := os.Symlink(filepath.Join(real, "real.yaml"), path); err != nil {
		t.Fatal(err)
	}
	got, _ := startWatch(t, path)
	expectData(t, got, "1", "start")
	mustWrite(t, filepath.Join(real, "real.yaml"), "2")
	expectWritten(t, got, "2", "write to the target")
}

// TestWatchPoll: with polling, a change is found without events (here the
// events are there too; polling must not deliver twice).
func TestWatchPoll(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	mustWrite(t, path, "p1")
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan delivery, 8)
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, path, WatchOptions{Debounce: 10 * time.Millisecond, Poll: 30 * time.Millisecond}, func(b []byte, err error) {
			got <- delivery{string(b), err}
		})
	}()
	expectData(t, got, "p1", "start")
	mustWrite(t, path, "p2")
	expectWritten(t, got, "p2", "change")
	expectNone(t, got, "polls of unchanged content")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch = %v", err)
	}
}

func TestChangedKeys(t *testing.T) {
	t.Parallel()
	a, b := Default(), Default()
	if keys := ChangedKeys(a, b); len(keys) != 0 {
		t.Errorf("ChangedKeys(default, default) = %v; want none", keys)
	}
	b.Listen = ":1"
	b.Store.Redis.Addrs = []string{"x:1"}
	b.EdgeLimit.Rate = 5
	b.Routes = []Route{{Name: "r"}}
	b.Idempotency.TenantHosts = map[string]string{"a": "b"}
	want := []string{"listen", "store.redis.addrs", "edge_limit.rate", "idempotency.tenant_hosts", "routes"}
	if keys := ChangedKeys(a, b); !slices.Equal(keys, want) {
		t.Errorf("ChangedKeys = %v; want %v", keys, want)
	}
}
