package testutil

import (
	"errors"
	"testing"
	"time"
)

// Eventually calls cond until it holds (returns true, or a nil error),
// sleeping a little between calls (1 ms at first, at most 50 ms), and
// fails t with what it waited for, and cond's last error, once within has
// passed without it: for state that a real server or goroutine reaches on
// its own time (a metric counted as a handler returns, a reload applied, a
// Redis failover). A condition on a fake clock needs no waiting.
func Eventually[C func() bool | func() error](t testing.TB, within time.Duration, what string, cond C) {
	t.Helper()
	var check func() error
	switch c := any(cond).(type) {
	case func() bool:
		check = func() error {
			if c() {
				return nil
			}
			return errNotYet
		}
	case func() error:
		check = c
	}
	deadline := time.Now().Add(within)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				t.Fatalf("%s: not within %v", what, within)
			} else {
				t.Fatalf("%s: not within %v: %v", what, within, err)
			}
			return
		}
		time.Sleep(pause)
	}
}

// errNotYet is a false bool condition's error.
var errNotYet = errors.New("not yet")
