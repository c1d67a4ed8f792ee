// Package memlimit sets the Go runtime's soft memory limit (GOMEMLIMIT)
// from the container's memory limit, so that the garbage collector works
// harder before the kernel's OOM killer steps in (DESIGN.md, "Bounds";
// issue 15: the chart's 512 Mi pod peaked at 887 MB RSS with no
// GOMEMLIMIT).
//
// It uses github.com/KimMachineGun/automemlimit, which reads cgroup v2 and
// v1 limits (walking the hierarchy, as nested containers need) and honours
// an explicit GOMEMLIMIT and its own AUTOMEMLIMIT override ("off", or a
// ratio such as 0.8).
package memlimit

import (
	"errors"
	"log/slog"
	"math"
	"runtime/debug"

	automem "github.com/KimMachineGun/automemlimit/memlimit"
)

// Ratio is the share of the container's memory limit given to GOMEMLIMIT:
// the rest is headroom for memory the Go heap does not count (goroutine
// stacks are counted; cgo, the binary's own pages and kernel buffers are
// not).
const Ratio = 0.9

// Sources of the limit that [Set] reports.
const (
	SourceEnv    = "env"    // GOMEMLIMIT (or AUTOMEMLIMIT=off) was set: left alone
	SourceCgroup = "cgroup" // set to Ratio of the cgroup's memory limit
	SourceNone   = "none"   // no cgroup limit found: no limit
	SourceError  = "error"  // the cgroup could not be read: left alone, logged
)

// Set sets GOMEMLIMIT to [Ratio] of the cgroup memory limit when the
// GOMEMLIMIT environment variable is unset, and returns the limit in force
// afterwards (math.MaxInt64 for none) and where it came from (one of the
// Source constants). It logs what it did on logger (nil: nothing is
// logged). Call it once, from main, before serving.
func Set(logger *slog.Logger) (limit int64, source string) {
	return set(logger, automem.FromCgroup)
}

func set(logger *slog.Logger, provider automem.Provider) (int64, string) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	called, unlimited := false, false
	p := func() (uint64, error) {
		called = true
		v, err := provider()
		if errors.Is(err, automem.ErrNoLimit) {
			unlimited = true
		}
		return v, err
	}
	limit, err := automem.Set(automem.WithProvider(p), automem.WithRatio(Ratio))
	switch {
	case err != nil:
		logger.Warn("GOMEMLIMIT not set from the container's memory limit", "error", err, "gomemlimit", limit)
		return limit, SourceError
	case !called:
		logger.Info("GOMEMLIMIT left as configured", "gomemlimit", limit)
		return limit, SourceEnv
	case unlimited:
		logger.Info("no container memory limit found; GOMEMLIMIT not set")
		return debug.SetMemoryLimit(-1), SourceNone
	default:
		logger.Info("GOMEMLIMIT set from the container's memory limit", "gomemlimit", limit, "ratio", Ratio)
		return limit, SourceCgroup
	}
}

// noLimit is the runtime's value for no memory limit.
const noLimit = math.MaxInt64
