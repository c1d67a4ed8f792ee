package canonjson_test

import (
	"bytes"
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
