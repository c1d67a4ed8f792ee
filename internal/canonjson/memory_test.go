package canonjson_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/canonjson"
)

// hostileBodies are 1 MiB documents shaped to make a canonicalizer hold as
// much as it can (issue 15: "[0,0,...]" used to cost 13 MB).
var hostileBodies = func() []struct {
	name string
	body []byte
	// want bounds the bytes Append allocates, dst included, as a multiple
	// of the body; 0 means only the general bound, len + WorkingMemory(len)
	// (shapes where the nesting's constant term dominates).
	want float64
} {
	const size = 1 << 20
	zeros := append(append([]byte{'['}, bytes.Repeat([]byte("0,"), size/2-1)...), '0', ']')
	var wide, unsorted, escaped, nested strings.Builder
	wide.WriteString("{")
	unsorted.WriteString("{")
	escaped.WriteString("{")
	for i := 0; wide.Len() < size-32; i++ {
		if i > 0 {
			wide.WriteByte(',')
			unsorted.WriteByte(',')
			escaped.WriteByte(',')
		}
		fmt.Fprintf(&wide, `"%06x":0`, i)
		fmt.Fprintf(&unsorted, `"%x":0`, 1<<24-i)
		fmt.Fprintf(&escaped, `"\u00%02x%x":0`, 0x20+i%90, i)
	}
	wide.WriteString("}")
	unsorted.WriteString("}")
	escaped.WriteString("}")
	// 16 levels of unsorted objects, each holding a 64 KiB unsorted one.
	for range 16 {
		nested.WriteString(`{"b":{`)
		for i := 0; i < 6000; i++ {
			if i > 0 {
				nested.WriteByte(',')
			}
			fmt.Fprintf(&nested, `"%x":0`, 1<<20-i)
		}
		nested.WriteString(`},"a":`)
	}
	nested.WriteString("0" + strings.Repeat("}", 16))
	deep := strings.Repeat("[", canonjson.MaxDepth) + strings.Repeat("]", canonjson.MaxDepth)
	return []struct {
		name string
		body []byte
		want float64
	}{
		{"zeros", zeros, 1.1},
		{"wide sorted object", []byte(wide.String()), 4.5},
		{"wide unsorted object", []byte(unsorted.String()), 4.5},
		{"escaped names", []byte(escaped.String()), 4.5},
		{"nested objects", []byte(nested.String()), 0},
		{"one long escaped string", []byte(`["` + strings.Repeat(`\n`, size/2) + `"]`), 2.1},
		{"deepest nesting", []byte(deep), 0},
	}
}()

// TestAppendMemoryBound: canonicalizing a hostile 1 MiB body allocates at
// most a small multiple of it (dst included), and never more than
// len(src) + WorkingMemory(len(src)). Not parallel: it reads the process's
// allocation counter.
func TestAppendMemoryBound(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own account (an extra MiB here)")
	}
	for _, hb := range hostileBodies {
		if _, ok := canonjson.Append(nil, hb.body, nil); !ok {
			t.Fatalf("%s: not canonicalizable", hb.name)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		out, ok := canonjson.Append(nil, hb.body, nil)
		runtime.ReadMemStats(&after)
		if !ok || len(out) == 0 {
			t.Fatalf("%s: not canonicalizable", hb.name)
		}
		got := after.TotalAlloc - before.TotalAlloc
		n := len(hb.body)
		limit := float64(int64(n) + canonjson.WorkingMemory(n))
		if hb.want > 0 {
			limit = min(limit, hb.want*float64(n))
		}
		t.Logf("%s: %d bytes body, %d bytes allocated (%.2f×)", hb.name, n, got, float64(got)/float64(n))
		if float64(got) > limit {
			t.Errorf("%s: allocated %d bytes for a %d-byte body (%.2f×); want at most %.0f", hb.name, got, n, float64(got)/float64(n), limit)
		}
	}
}

// BenchmarkAppendHostile reports B/op for the hostile 1 MiB bodies with a
// fresh dst each time, as the proxy canonicalizes (dst is 1× of it).
func BenchmarkAppendHostile(b *testing.B) {
	for _, hb := range hostileBodies {
		b.Run(strings.ReplaceAll(hb.name, " ", "_"), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(hb.body)))
			for b.Loop() {
				if _, ok := canonjson.Append(nil, hb.body, nil); !ok {
					b.Fatal("not canonicalizable")
				}
			}
		})
	}
}

// TestAppendDeepUnsortedRefused: objects nested thousands of levels deep in
// unsorted objects would be copied once per level (quadratic time): they
// are refused, quickly, however they are formatted.
func TestAppendDeepUnsortedRefused(t *testing.T) {
	t.Parallel()
	for _, sep := range []string{"", " \n "} {
		var b strings.Builder
		for range canonjson.MaxDepth - 3 {
			b.WriteString(`{"b":[1,{"a":"x\n"}],` + sep + `"a":`)
		}
		b.WriteString("0" + strings.Repeat("}", canonjson.MaxDepth-3))
		if out, ok := canonjson.Append(nil, []byte(b.String()), nil); ok {
			t.Errorf("separator %q: canonicalized %d bytes; want refused", sep, len(out))
		}
	}
	// The same nesting with sorted members moves nothing and is fine.
	var b strings.Builder
	for range canonjson.MaxDepth - 3 {
		b.WriteString(`{"a":[1,{"a":"x\n"}],"b":`)
	}
	b.WriteString("0" + strings.Repeat("}", canonjson.MaxDepth-3))
	if _, ok := canonjson.Append(nil, []byte(b.String()), nil); !ok {
		t.Error("sorted deep nesting refused; want canonicalized")
	}
}

// TestAppendCharged: the bytes charged cover what Append allocates (within
// the allocator's rounding), stay within len + WorkingMemory, and a refusal
// stops it with the charge's error and dst unchanged.
func TestAppendCharged(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own account")
	}
	for _, hb := range hostileBodies {
		var total int64
		charge := func(n int64) error { total += n; return nil }
		canonjson.AppendCharged(nil, hb.body, nil, charge) // warm the pool
		total = 0
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		out, charged, ok, err := canonjson.AppendCharged(nil, hb.body, nil, charge)
		runtime.ReadMemStats(&after)
		if !ok || err != nil || len(out) == 0 {
			t.Fatalf("%s: ok %v, err %v", hb.name, ok, err)
		}
		alloc := int64(after.TotalAlloc - before.TotalAlloc)
		n := len(hb.body)
		if charged != total {
			t.Errorf("%s: returned charged %d; the charge func saw %d", hb.name, charged, total)
		}
		// The allocator rounds sizes up to its size classes (at most 12.5 %
		// for large objects, a page for huge ones).
		if float64(alloc) > float64(charged)*1.125+8192 {
			t.Errorf("%s: allocated %d, charged only %d", hb.name, alloc, charged)
		}
		if charged > int64(n)+canonjson.WorkingMemory(n) {
			t.Errorf("%s: charged %d; over len + WorkingMemory = %d", hb.name, charged, int64(n)+canonjson.WorkingMemory(n))
		}
	}
}

func TestAppendChargedRefused(t *testing.T) {
	t.Parallel()
	errFull := errors.New("full")
	body := []byte(`{"b":1,"a":2}`)
	for _, limit := range []int64{0, int64(len(body)), 200, 1000} {
		var used int64
		charge := func(n int64) error {
			if used+n > limit {
				return errFull
			}
			used += n
			return nil
		}
		dst := []byte("x")
		out, charged, ok, err := canonjson.AppendCharged(dst[:1:1], body, nil, charge)
		if charged != used {
			t.Errorf("limit %d: charged %d; the budget holds %d", limit, charged, used)
		}
		switch {
		case ok && err == nil:
			if string(out) != `x{"a":2,"b":1}` {
				t.Errorf("limit %d: %q", limit, out)
			}
		case !ok && errors.Is(err, errFull):
			if string(out) != "x" {
				t.Errorf("limit %d: refused but dst changed to %q", limit, out)
			}
		default:
			t.Errorf("limit %d: ok %v, err %v", limit, ok, err)
		}
	}
	// Not canonicalizable is not a charge error.
	if _, _, ok, err := canonjson.AppendCharged(nil, []byte(`{"a":1,"a":2}`), nil, func(int64) error { return nil }); ok || err != nil {
		t.Errorf("duplicate names: ok %v, err %v; want false, nil", ok, err)
	}
}
