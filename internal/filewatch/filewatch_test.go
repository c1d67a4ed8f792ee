package filewatch

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// run starts l with Changed reporting on the returned channel, and stops it
// when the test ends.
func run(t *testing.T, l Loop) <-chan bool {
	t.Helper()
	calls := make(chan bool, 16)
	l.Changed = func(forced bool) { calls <- forced }
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		l.Run(done)
	}()
	t.Cleanup(func() {
		close(done)
		<-stopped
	})
	return calls
}

// next returns ch's next value, and fails the test after 10s without one.
func next[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received within 10s")
		panic("unreachable")
	}
}

func quiet(t *testing.T, calls <-chan bool, d time.Duration) {
	t.Helper()
	select {
	case forced := <-calls:
		t.Fatalf("Changed(%v) was called; want no call", forced)
	case <-time.After(d):
	}
}

func watcher(t *testing.T, dir string) *fsnotify.Watcher {
	t.Helper()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Skipf("no fsnotify here: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	return w
}

// TestEvents: a burst of writes to a relevant file gives one Changed(false)
// after the debounce; a write to an irrelevant one gives none.
func TestEvents(t *testing.T) {
	dir := t.TempDir()
	want := filepath.Join(dir, "a")
	calls := run(t, Loop{
		Watcher:  watcher(t, dir),
		Relevant: func(name string) bool { return name == want },
		Debounce: 50 * time.Millisecond,
	})
	if err := os.WriteFile(filepath.Join(dir, "b"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	quiet(t, calls, 300*time.Millisecond)
	for i := range 5 {
		if err := os.WriteFile(want, []byte{byte(i)}, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if forced := next(t, calls); forced {
		t.Error("Changed(true) after events; want false")
	}
	quiet(t, calls, 300*time.Millisecond)
}

// TestMaxDelay: events that never pause still run Changed once MaxDelay
// has passed since the first.
func TestMaxDelay(t *testing.T) {
	dir := t.TempDir()
	calls := run(t, Loop{Watcher: watcher(t, dir), Debounce: time.Hour, MaxDelay: 100 * time.Millisecond})
	start := time.Now()
	for time.Since(start) < 5*time.Second {
		if err := os.WriteFile(filepath.Join(dir, "a"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		select {
		case forced := <-calls:
			if forced {
				t.Error("Changed(true); want false")
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("Changed was not called within 5s of events with a debounce of 1h and a MaxDelay of 100ms")
}

// TestForcePollError: a receive from Force runs Changed(true), a poll
// Changed(false), and the watcher's errors reach Error.
func TestForcePollError(t *testing.T) {
	force := make(chan struct{})
	calls := run(t, Loop{Force: force})
	force <- struct{}{}
	if !next(t, calls) {
		t.Error("Changed(false) after Force; want true")
	}
	quiet(t, calls, 100*time.Millisecond) // no Poll: no call

	calls = run(t, Loop{Poll: 10 * time.Millisecond})
	for range 3 {
		if next(t, calls) {
			t.Error("Changed(true) on a poll; want false")
		}
	}

	w := &fsnotify.Watcher{Events: make(chan fsnotify.Event), Errors: make(chan error, 1)}
	got := make(chan error, 1)
	run(t, Loop{Watcher: w, Error: func(err error) { got <- err }})
	boom := errors.New("boom")
	w.Errors <- boom
	if err := next(t, got); err != boom {
		t.Errorf("Error(%v); want boom", err)
	}
}
