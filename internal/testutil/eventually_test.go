package testutil

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf and Errorf record their
// messages instead of failing the test (and ending the goroutine).
type fatalRecorder struct {
	testing.TB
	msgs []string
}

func (*fatalRecorder) Helper() {}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *fatalRecorder) Errorf(format string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

// Eventually returns once cond holds, having called it until then, and
// fails, naming what it waited for and cond's last error, once within has
// passed.
func TestEventually(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		run       func(t testing.TB, calls *int)
		wantCalls int // 0: at least 2
		wantMsg   string
	}{
		{"bool holds on the third call", func(t testing.TB, calls *int) {
			Eventually(t, time.Minute, "three calls", func() bool { *calls++; return *calls == 3 })
		}, 3, ""},
		{"error nil on the third call", func(t testing.TB, calls *int) {
			Eventually(t, time.Minute, "three calls", func() error {
				if *calls++; *calls < 3 {
					return errors.New("too few")
				}
				return nil
			})
		}, 3, ""},
		{"bool never", func(t testing.TB, calls *int) {
			Eventually(t, 30*time.Millisecond, "the moon", func() bool { *calls++; return false })
		}, 0, "the moon: not within 30ms"},
		{"error never", func(t testing.TB, calls *int) {
			Eventually(t, 30*time.Millisecond, "a failover", func() error { *calls++; return fmt.Errorf("still %d", *calls) })
		}, 0, "a failover: not within 30ms: still "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &fatalRecorder{TB: t}
			calls := 0
			start := time.Now()
			tt.run(r, &calls)
			switch {
			case tt.wantMsg == "" && len(r.msgs) != 0:
				t.Errorf("failed: %q; want no failure", r.msgs)
			case tt.wantMsg != "" && (len(r.msgs) != 1 || len(r.msgs[0]) < len(tt.wantMsg) || r.msgs[0][:len(tt.wantMsg)] != tt.wantMsg):
				t.Errorf("failures %q; want one starting %q", r.msgs, tt.wantMsg)
			case tt.wantMsg != "" && time.Since(start) < 30*time.Millisecond:
				t.Errorf("failed after %v; want not before 30ms", time.Since(start))
			}
			if tt.wantCalls != 0 && calls != tt.wantCalls || tt.wantCalls == 0 && calls < 2 {
				t.Errorf("cond called %d times; want %d (0: at least 2)", calls, tt.wantCalls)
			}
		})
	}
}
