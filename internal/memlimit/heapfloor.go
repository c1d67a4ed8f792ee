package memlimit

import (
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// DefaultHeapFloor is the heap size below which [KeepHeapFloor] lets no
// garbage collection start.
const DefaultHeapFloor = 64 << 20

// maxPercent bounds the GOGC percent the floor sets (a live heap of 1 MiB
// under a 64 MiB floor needs 6300).
const maxPercent = 10000

// KeepHeapFloor keeps the garbage collector from starting a cycle before
// the heap reaches floor bytes (at most a quarter of limit, the memory
// limit in force, so that a small container keeps its headroom), when the
// GOGC environment variable is unset. Above the floor the collector runs
// as with GOGC=100, and GOMEMLIMIT bounds the heap as before. It returns a
// function that stops the adjustment and puts GOGC back at 100 (tests;
// the server keeps it for its life).
//
// Why: a proxy's live heap is a few MiB, and at a few thousand requests a
// second it allocates some 100 MB/s, so Go's default started a cycle 20
// times a second, each with its mark assists and background workers: 9 %
// of a pass-through's CPU in idemgate (perf, issue 31). Letting the heap
// reach 64 MiB first takes most of that, for at most that much memory.
//
// How: Go has no minimum heap setting. After every cycle (a cleanup on an
// object left unreachable at once runs after the cycle that collected it)
// the live heap is read and GOGC set so that the next cycle's goal is the
// floor, or 100 when the live heap's own goal is past it: the technique
// of Uber's GOGC tuner, without a ballast that would show in the heap's
// metrics and count against GOMEMLIMIT; and a memory limit guards the
// floor against a live heap that jumps within a cycle (see cycle). Call it
// after GOMEMLIMIT is set ([Set]).
func KeepHeapFloor(logger *slog.Logger, floor, limit int64) (stop func()) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if v, ok := os.LookupEnv("GOGC"); ok {
		logger.Info("GOGC left as configured; no heap floor", "gogc", v)
		return func() {}
	}
	if limit > 0 && limit < math.MaxInt64 {
		floor = min(floor, limit/4)
	}
	if floor <= 0 {
		return func() {}
	}
	t := newFloorTuner(uint64(floor))
	t.cycle()
	logger.Info("garbage collection waits for the heap floor", "heap_floor", floor)
	return t.stop
}

// The runtime metrics the tuner reads after each cycle: the heap the
// cycle found live, and what the memory limit counts (total minus
// released) apart from the heap's objects.
var floorMetrics = []string{
	"/gc/heap/live:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/objects:bytes",
}

type floorTuner struct {
	floor uint64
	// limit is the memory limit in force without the floor (GOMEMLIMIT,
	// or none): the guard below never raises it.
	limit int64

	mu      sync.Mutex // protects the fields below
	sample  []metrics.Sample
	percent int
	guard   int64
	stopped bool
	// adjusted, when set (tests), is called after every adjustment.
	adjusted func(live uint64, percent int)
}

func newFloorTuner(floor uint64) *floorTuner {
	t := &floorTuner{floor: floor, limit: debug.SetMemoryLimit(-1), sample: make([]metrics.Sample, len(floorMetrics))}
	for i, name := range floorMetrics {
		t.sample[i].Name = name
	}
	return t
}

// cycle adjusts GOGC to the live heap and arms the next cycle's call.
//
// A GOGC over 100 is set from the live heap of the cycle before, and the
// runtime applies it to the next cycle's live heap: when the live heap
// jumps within a cycle (many large bodies at once), the goal would jump
// with it, ten times over, until the next adjustment. So while the floor
// is in force, a memory limit guards it too: the floor, or twice the live
// heap, plus the memory that is not the heap's objects, never above the
// limit in force without the floor. The runtime collects when either is
// reached, so the heap never passes that guard by more than one cycle's
// growth, and past half the floor both are back at GOGC=100 and the limit
// as it was.
func (t *floorTuner) cycle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	metrics.Read(t.sample)
	v := func(i int) uint64 {
		if s := t.sample[i]; s.Value.Kind() == metrics.KindUint64 {
			return s.Value.Uint64()
		}
		return 0
	}
	if v(1) == 0 {
		// The metrics could not be read (a runtime without them): leave
		// the collector as it is rather than set it from a live heap of 0.
		runtime.AddCleanup(&sentinel{}, (*floorTuner).cycle, t)
		return
	}
	live, counted := v(0), v(1)-v(2)
	p := floorPercent(live, t.floor)
	guard := t.limit
	if p > 100 {
		other := counted - min(counted, v(3))
		guard = min(t.limit, int64(min(max(t.floor, 2*live)+other, math.MaxInt64/2)))
	}
	if p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
	if guard != t.guard {
		debug.SetMemoryLimit(guard)
		t.guard = guard
	}
	if t.adjusted != nil {
		t.adjusted(live, t.percent)
	}
	runtime.AddCleanup(&sentinel{}, (*floorTuner).cycle, t)
}

func (t *floorTuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(t.limit)
	}
}

// sentinel is the object whose cleanup runs after each cycle. It holds a
// pointer so that it is its own allocation (the tiny allocator packs
// pointer-free objects together, and their cleanups may never run).
type sentinel struct{ _ *byte }

// floorPercent is the GOGC percent whose goal for a live heap of live
// bytes is floor: 100 when GOGC=100's own goal (twice the live heap)
// reaches it.
func floorPercent(live, floor uint64) int {
	live = max(live, 1)
	if live >= floor/2 {
		return 100
	}
	p := ((floor-live)*100 + live - 1) / live // rounded up
	return int(min(p, maxPercent))
}
