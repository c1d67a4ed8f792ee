package memlimit

import (
	"bytes"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestFloorPercent(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		live, floor uint64
		want        int
	}{
		{0, 64 * mib, maxPercent},
		{1, 64 * mib, maxPercent},
		{1 * mib, 64 * mib, 6300},
		{4 * mib, 64 * mib, 1500},
		{5 * mib, 64 * mib, 1180},
		{3 * mib, 64 * mib, 2034}, // 61/3 rounded up: the goal is never under the floor
		{31 * mib, 64 * mib, 107},
		{32 * mib, 64 * mib, 100}, // GOGC=100's own goal is the floor
		{500 * mib, 64 * mib, 100},
	} {
		got := floorPercent(tc.live, tc.floor)
		if got != tc.want {
			t.Errorf("floorPercent(%d, %d) = %d; want %d", tc.live, tc.floor, got, tc.want)
		}
		if got < maxPercent && tc.live > 0 && tc.live*uint64(100+got)/100 < tc.floor {
			t.Errorf("floorPercent(%d, %d) = %d: the goal %d is under the floor", tc.live, tc.floor, got, tc.live*uint64(100+got)/100)
		}
	}
}

// startFloor starts a tuner like KeepHeapFloor's whose adjustments the
// test receives, and stops it when the test ends.
func startFloor(t *testing.T, floor uint64) (*floorTuner, <-chan int) {
	t.Helper()
	got := make(chan int, 64)
	ft := newFloorTuner(floor)
	ft.adjusted = func(_ uint64, p int) {
		select {
		case got <- p:
		default:
		}
	}
	ft.cycle()
	t.Cleanup(func() { ft.stop(); debug.SetGCPercent(100) })
	return ft, got
}

// adjustTo forces collections until the tuner's adjustment after one
// satisfies want (an adjustment queued by an earlier cycle may come
// first), and returns it; the test fails after 10 s.
func adjustTo(t *testing.T, got <-chan int, what string, want func(int) bool) int {
	t.Helper()
	deadline := time.After(10 * time.Second)
	last := 0
	for {
		runtime.GC()
		select {
		case p := <-got:
			if last = p; want(p) {
				return p
			}
		case <-deadline:
			t.Fatalf("%s: GOGC %d 10 s after the first collection", what, last)
			return 0
		}
	}
}

var sink []byte

// TestHeapFloorHoldsCycles allocates 96 MiB of garbage and counts the
// collections: with a 256 MiB floor, at most one; without it (GOGC=100 on
// this test's small heap), many.
func TestHeapFloorHoldsCycles(t *testing.T) {
	cycles := func() uint32 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.NumGC
	}
	churn := func() uint32 {
		before := cycles()
		for i := 0; i < 96<<4; i++ { // 96 MiB in 64 KiB pieces
			sink = make([]byte, 64<<10)
		}
		return cycles() - before
	}
	debug.SetGCPercent(100)
	runtime.GC()
	if n := churn(); n < 8 {
		t.Fatalf("without a floor: %d collections for 96 MiB of garbage; want many (the test's premise)", n)
	}

	_, got := startFloor(t, 256<<20)
	if p := <-got; p <= 100 { // armed at once
		t.Fatalf("at start: GOGC %d; want over 100 for a small live heap", p)
	}
	adjustTo(t, got, "small live heap", func(p int) bool { return p > 100 })
	if n := churn(); n > 1 {
		t.Errorf("with a 256 MiB floor: %d collections for 96 MiB of garbage; want at most 1", n)
	}
}

// TestHeapFloorLiveHeap: a live heap past half the floor gets GOGC=100,
// and the floor comes back when it is freed.
func TestHeapFloorLiveHeap(t *testing.T) {
	_, got := startFloor(t, 64<<20)
	<-got
	live := make([][]byte, 48)
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	adjustTo(t, got, "48 MiB live under a 64 MiB floor", func(p int) bool { return p == 100 })
	if l := debug.SetMemoryLimit(-1); l != math.MaxInt64 {
		t.Errorf("48 MiB live under a 64 MiB floor: memory limit %d; want none, as before", l)
	}
	runtime.KeepAlive(live)
	live = nil
	adjustTo(t, got, "heap freed", func(p int) bool { return p > 100 })
}

func TestHeapFloorStop(t *testing.T) {
	ft, got := startFloor(t, 256<<20)
	if p := <-got; p <= 100 {
		t.Fatalf("GOGC %d; want over 100", p)
	}
	// The guard: the floor plus the memory that is not the heap's objects
	// (this test binary's churn left some).
	if l := debug.SetMemoryLimit(-1); l < 256<<20 || l == math.MaxInt64 {
		t.Errorf("with the floor in force: memory limit %d; want a guard past the 256 MiB floor", l)
	}
	ft.stop()
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("after stop: GOGC %d; want 100", p)
	}
	if l := debug.SetMemoryLimit(-1); l != ft.limit {
		t.Errorf("after stop: memory limit %d; want %d, as before", l, ft.limit)
	}
	runtime.GC()
	runtime.GC()
	select {
	case p := <-got:
		t.Errorf("after stop: adjusted to %d", p)
	case <-time.After(100 * time.Millisecond): // a cleanup that would adjust runs right after the cycle
	}
}

func TestKeepHeapFloor(t *testing.T) {
	for _, tc := range []struct {
		name      string
		gogc      string // "" unset
		limit     int64
		wantFloor string // the logged floor, "" for none
	}{
		{"no limit", "", math.MaxInt64, `"heap_floor":67108864`},
		{"1 GiB limit", "", 1 << 30, `"heap_floor":67108864`},
		{"100 MiB limit", "", 100 << 20, `"heap_floor":26214400`},
		{"GOGC set", "100", math.MaxInt64, ""},
		{"GOGC off", "off", math.MaxInt64, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.gogc != "" {
				t.Setenv("GOGC", tc.gogc)
			} else {
				t.Setenv("GOGC", "")
				unsetenv(t, "GOGC")
			}
			var buf bytes.Buffer
			stop := KeepHeapFloor(slog.New(slog.NewJSONHandler(&buf, nil)), DefaultHeapFloor, tc.limit)
			p := debug.SetGCPercent(100)
			stop()
			debug.SetGCPercent(100)
			if tc.wantFloor == "" {
				if p != 100 || !strings.Contains(buf.String(), "GOGC left as configured") {
					t.Errorf("GOGC %d, log %s; want 100, left alone and logged", p, buf.String())
				}
				return
			}
			if p <= 100 || !strings.Contains(buf.String(), tc.wantFloor) {
				t.Errorf("GOGC %d, log %s; want over 100 and %s", p, buf.String(), tc.wantFloor)
			}
		})
	}
}
