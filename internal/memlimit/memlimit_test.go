package memlimit

import (
	"errors"
	"log/slog"
	"math"
	"runtime/debug"
	"testing"

	automem "github.com/KimMachineGun/automemlimit/memlimit"
)

// The tests change the process's memory limit and environment: none runs
// in parallel, and each restores the limit.
func restore(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
}

func TestSet(t *testing.T) {
	for _, tc := range []struct {
		name       string
		env        string // GOMEMLIMIT; "" unset
		provider   automem.Provider
		wantLimit  int64
		wantSource string
	}{
		{"cgroup limit", "", automem.Limit(1 << 30), 966367641, SourceCgroup},
		{"no cgroup limit", "", func() (uint64, error) { return 0, automem.ErrNoLimit }, noLimit, SourceNone},
		{"cgroup unreadable", "", func() (uint64, error) { return 0, errors.New("no cgroup") }, noLimit, SourceError},
		{"GOMEMLIMIT set", "300MiB", automem.Limit(1 << 30), noLimit, SourceEnv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			restore(t)
			debug.SetMemoryLimit(math.MaxInt64)
			if tc.env != "" {
				t.Setenv("GOMEMLIMIT", tc.env)
			} else {
				t.Setenv("GOMEMLIMIT", "")
				unsetenv(t, "GOMEMLIMIT")
			}
			unsetenv(t, "AUTOMEMLIMIT")
			limit, source := set(slog.New(slog.DiscardHandler), tc.provider)
			if limit != tc.wantLimit || source != tc.wantSource {
				t.Errorf("set = %d, %q; want %d, %q", limit, source, tc.wantLimit, tc.wantSource)
			}
			if got := debug.SetMemoryLimit(-1); got != tc.wantLimit {
				t.Errorf("runtime limit = %d; want %d", got, tc.wantLimit)
			}
		})
	}
}

// TestSetHere runs the real cgroup provider: whatever this machine has, an
// unset GOMEMLIMIT is either set from a cgroup limit or left alone.
func TestSetHere(t *testing.T) {
	restore(t)
	t.Setenv("GOMEMLIMIT", "")
	unsetenv(t, "GOMEMLIMIT")
	unsetenv(t, "AUTOMEMLIMIT")
	debug.SetMemoryLimit(math.MaxInt64)
	limit, source := Set(nil)
	t.Logf("limit %d from %s", limit, source)
	switch source {
	case SourceCgroup:
		if limit <= 0 || limit == noLimit {
			t.Errorf("cgroup source with limit %d", limit)
		}
	case SourceNone, SourceError:
		if limit != noLimit || debug.SetMemoryLimit(-1) != noLimit {
			t.Errorf("%s: limit %d changed", source, limit)
		}
	default:
		t.Errorf("source %q with GOMEMLIMIT unset", source)
	}
}
