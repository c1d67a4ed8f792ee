package canonjson_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/canonjson"
)

// canonCases are valid documents and their canonical form, with no pointers.
var canonCases = []struct {
	name, in, want string
}{
	{"keys sorted", `{"b":1,"a":2,"c":3}`, `{"a":2,"b":1,"c":3}`},
	{"nested keys sorted", `{"z":{"y":1,"x":[{"b":0,"a":0}]},"a":null}`, `{"a":null,"z":{"x":[{"a":0,"b":0}],"y":1}}`},
	{"whitespace dropped", " {\n\t\"a\" : [ 1 ,\r\n 2 ] ,\"b\":{ } , \"c\" : [ ] }\n", `{"a":[1,2],"b":{},"c":[]}`},
	{"array order kept", `[3,1,2,"b","a"]`, `[3,1,2,"b","a"]`},
	{"numbers literal", `[1, 1.0, 1e0, 1E+0, 1e-0, -0, 0.10, -12.5e+30, 123456789012345678901234567890]`, `[1,1.0,1e0,1E+0,1e-0,-0,0.10,-12.5e+30,123456789012345678901234567890]`},
	{"literals", `[true,false,null]`, `[true,false,null]`},
	{"top-level number", ` -0.5e-3 `, `-0.5e-3`},
	{"top-level string", `"x"`, `"x"`},
	{"top-level true", `true`, `true`},
	{"top-level null", "null\n", `null`},
	{"empty object", `{ }`, `{}`},
	{"empty array", `[ ]`, `[]`},
	{"empty string and key", `{"":""}`, `{"":""}`},
	{"escape u00e9", `"caf\u00e9"`, `"café"`},
	{"escape upper-case hex", `"caf\u00E9"`, `"café"`},
	{"raw non-ASCII", `"café"`, `"café"`},
	{"escaped solidus", `"a\/b"`, `"a/b"`},
	{"escape u0041", `"\u0041"`, `"A"`},
	{"escaped quote and backslash", `"\"\\\u0022\u005c"`, `"\"\\\"\\"`},
	{"short escapes kept", `"\b\f\n\r\t"`, `"\b\f\n\r\t"`},
	{"short escapes from u", `"\u0008\u000c\u000a\u000D\u0009"`, `"\b\f\n\r\t"`},
	{"other controls lower hex", `"\u0000\u001F\u000B"`, `"\u0000\u001f\u000b"`},
	{"DEL raw", `"\u007f"`, "\"\x7f\""},
	{"surrogate pair", `"\ud83d\ude00"`, `"😀"`},
	{"surrogate pair upper-case", `"\uD83D\uDE00"`, `"😀"`},
	{"line separators raw", `"\u2028\u2029"`, "\"\u2028\u2029\""},
	{"U+FFFD raw", `"\ufffd"`, "\"\ufffd\""},
	{"keys sorted by decoded bytes", `{"z":1,"\u00e9":2,"a":3}`, `{"a":3,"z":1,"é":2}`},
	{"keys sorted by UTF-8 not UTF-16", `{"\ud83d\ude00":1,"\uff61":2}`, `{"｡":2,"😀":1}`},
	{"escaped key", `{"a\/b":1,"a\"":2}`, `{"a\"":2,"a/b":1}`},
	{"key prefix sorts first", `{"ab":1,"a":2,"":3}`, `{"":3,"a":2,"ab":1}`},
}

func canon(t testing.TB, in string, ignore ...string) (string, bool) {
	t.Helper()
	ptrs := make([]canonjson.Pointer, len(ignore))
	for i, s := range ignore {
		p, err := canonjson.ParsePointer(s)
		if err != nil {
			t.Fatalf("ParsePointer(%q): %v", s, err)
		}
		ptrs[i] = p
	}
	out, ok := canonjson.Append(nil, []byte(in), ptrs)
	return string(out), ok
}

func TestAppend(t *testing.T) {
	t.Parallel()
	for _, tc := range canonCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := canon(t, tc.in)
			if !ok || got != tc.want {
				t.Errorf("Append(%q) = %q, %v; want %q, true", tc.in, got, ok, tc.want)
			}
			// The canonical form is a fixed point.
			if again, ok := canon(t, got); !ok || again != got {
				t.Errorf("Append(%q) = %q, %v; want %q, true", got, again, ok, got)
			}
		})
	}
}

func TestAppendSame(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, a, b string }{
		{"key order", `{"a":1,"b":2}`, `{"b":2,"a":1}`},
		{"whitespace", `{"a":[1,2]}`, "{ \"a\" :\n[1 ,\t2] }"},
		{"u00e9 and raw", `{"k":"\u00e9"}`, `{"k":"é"}`},
		{"escaped solidus", `"\/"`, `"/"`},
		{"u0041 and A", `{"\u0041":1}`, `{"A":1}`},
		{"short escape and u", `"\n"`, `"\u000a"`},
		{"surrogate pair and raw", `"\ud83d\ude00"`, `"😀"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, okA := canon(t, tc.a)
			b, okB := canon(t, tc.b)
			if !okA || !okB || a != b {
				t.Errorf("Append(%q) = %q, %v and Append(%q) = %q, %v; want equal", tc.a, a, okA, tc.b, b, okB)
			}
		})
	}
}

func TestAppendDifferent(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, a, b string }{
		{"1 and 1.0", `{"n":1}`, `{"n":1.0}`},
		{"1 and 1e0", `[1]`, `[1e0]`},
		{"0 and -0", `0`, `-0`},
		{"array order", `[1,2]`, `[2,1]`},
		{"case", `"a"`, `"A"`},
		{"string and number", `"1"`, `1`},
		{"null and missing", `{"a":null}`, `{}`},
		{"empty array and object", `[]`, `{}`},
		{"NUL kept", `"a\u0000"`, `"a"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, okA := canon(t, tc.a)
			b, okB := canon(t, tc.b)
			if !okA || !okB || a == b {
				t.Errorf("Append(%q) = %q, %v and Append(%q) = %q, %v; want both ok and different", tc.a, a, okA, tc.b, b, okB)
			}
		})
	}
}

// invalidCases are not canonicalizable.
var invalidCases = []struct{ name, in string }{
	{"empty", ""},
	{"whitespace only", " \n\t"},
	{"unclosed object", `{`},
	{"unclosed array", `[1,2`},
	{"lone close", `}`},
	{"mismatched close", `[1}`},
	{"mismatched close object", `{"a":1]`},
	{"trailing comma array", `[1,]`},
	{"trailing comma object", `{"a":1,}`},
	{"leading comma", `[,1]`},
	{"missing colon", `{"a" 1}`},
	{"double colon", `{"a"::1}`},
	{"missing value", `{"a":}`},
	{"key without value", `{"a"}`},
	{"unquoted key", `{a:1}`},
	{"number key", `{1:1}`},
	{"missing comma", `{"a":1 "b":2}`},
	{"semicolon", `[1;2]`},
	{"single quotes", `'a'`},
	{"trailing garbage", `{"a":1}x`},
	{"two values", `1 2`},
	{"two objects", `{} {}`},
	{"trailing garbage after array", `[1]]`},
	{"leading zero", `01`},
	{"leading zero negative", `-01`},
	{"leading zero in array", `[00]`},
	{"minus alone", `-`},
	{"plus sign", `+1`},
	{"dot first", `.5`},
	{"dot last", `1.`},
	{"exponent empty", `1e`},
	{"exponent sign only", `1e+`},
	{"hex number", `0x10`},
	{"NaN", `NaN`},
	{"Infinity", `-Infinity`},
	{"truncated true", `tru`},
	{"true with garbage", `truex`},
	{"capital true", `True`},
	{"truncated null", `nul`},
	{"unterminated string", `"abc`},
	{"unterminated after escape", `"abc\`},
	{"bad escape", `"\x41"`},
	{"short u escape", `"\u12"`},
	{"non-hex u escape", `"\u12g4"`},
	{"lone high surrogate", `"\ud800"`},
	{"lone high surrogate at end", `"a\ud800`},
	{"lone low surrogate", `"\udc00"`},
	{"high surrogate then letter", `"\ud800\u0041"`},
	{"high surrogate then high", `"\ud800\ud800"`},
	{"high surrogate then short escape", `"\ud800\n"`},
	{"raw tab in string", "\"a\tb\""},
	{"raw newline in string", "\"a\nb\""},
	{"raw NUL", "\"\x00\""},
	{"invalid UTF-8", "\"\xff\""},
	{"invalid UTF-8 after escape", "\"\\n\xff\""},
	{"invalid UTF-8 in key", "{\"\xc3\":1}"},
	{"truncated UTF-8", "\"\xc3\""},
	{"overlong UTF-8", "\"\xc0\x80\""},
	{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\""},
	{"byte order mark", "\ufeff{}"},
	{"NUL outside string", "\x00"},
	{"vertical tab whitespace", "\v1"},
	{"comment", `{"a":1 /* c */}`},
	{"duplicate key", `{"a":1,"a":2}`},
	{"duplicate key same value", `{"a":1,"b":2,"a":1}`},
	{"duplicate key via escape", `{"é":1,"\u00e9":2}`},
	{"duplicate key via solidus", `{"a/b":1,"a\/b":2}`},
	{"duplicate nested key", `{"x":{"a":1,"a":2}}`},
	{"duplicate key in array element", `[{"a":1},{"b":1,"b":1}]`},
	{"duplicate empty key", `{"":1,"":2}`},
}

func TestAppendInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range invalidCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got, ok := canon(t, tc.in); ok {
				t.Errorf("Append(%q) = %q, true; want false", tc.in, got)
			}
		})
	}
}

// TestAppendIgnoredDuplicate pins that duplicates count even inside a member
// that a pointer removes: which of the two would be removed is ambiguous.
func TestAppendIgnoredDuplicate(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`{"meta":{"a":1,"a":2}}`, `{"meta":1,"meta":2}`} {
		if got, ok := canon(t, in, "/meta"); ok {
			t.Errorf("Append(%q, /meta) = %q, true; want false", in, got)
		}
	}
}

func TestAppendDepth(t *testing.T) {
	t.Parallel()
	nest := func(open, close string, n int) string {
		return strings.Repeat(open, n) + strings.Repeat(close, n)
	}
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"arrays at MaxDepth", nest("[", "]", canonjson.MaxDepth), true},
		{"arrays over MaxDepth", nest("[", "]", canonjson.MaxDepth+1), false},
		{"objects at MaxDepth", strings.Repeat(`{"a":`, canonjson.MaxDepth-1) + "{}" + strings.Repeat("}", canonjson.MaxDepth-1), true},
		{"objects over MaxDepth", strings.Repeat(`{"a":`, canonjson.MaxDepth) + "{}" + strings.Repeat("}", canonjson.MaxDepth), false},
		{"million unclosed brackets", strings.Repeat("[", 1<<20), false},
		{"million balanced brackets", nest("[", "]", 1<<20), false},
		{"million sequential arrays", "[" + strings.Repeat("[[]],", 1<<20) + "[]]", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := canon(t, tc.in)
			if ok != tc.ok {
				t.Fatalf("Append(%d bytes) ok = %v; want %v", len(tc.in), ok, tc.ok)
			}
			if ok && got != strings.Join(strings.Fields(tc.in), "") {
				t.Errorf("Append(%d bytes) changed the document", len(tc.in))
			}
			if ok != json.Valid([]byte(tc.in)) {
				t.Errorf("Append ok = %v but json.Valid = %v", ok, !ok)
			}
		})
	}
}

// ignoreCases are valid documents, pointers to ignore and the canonical form.
var ignoreCases = []struct {
	name   string
	in     string
	ignore []string
	want   string
}{
	{"top-level member", `{"a":1,"b":2}`, []string{"/b"}, `{"a":1}`},
	{"empty object member", `{"q":"m","v":{ },"e":{ }}`, []string{"/q", "/v"}, `{"e":{}}`},
	{"index after an empty array", `[[],[ ],1,2]`, []string{"/2"}, `[[],[],2]`},
	{"removed first member, unsorted rest", `{"z":0,"b":1,"a":2}`, []string{"/z"}, `{"a":2,"b":1}`},
	{"nested member", `{"meta":{"sent_at":"2024-01-01T00:00:00Z","id":7},"x":1}`, []string{"/meta/sent_at"}, `{"meta":{"id":7},"x":1}`},
	{"whole object member", `{"meta":{"sent_at":1},"x":1}`, []string{"/meta"}, `{"x":1}`},
	{"all members", `{"a":1,"b":2}`, []string{"/a", "/b"}, `{}`},
	{"escaped slash ~1", `{"a/b":1,"a":{"b":2}}`, []string{"/a~1b"}, `{"a":{"b":2}}`},
	{"escaped tilde ~0", `{"m~n":1,"mn":2}`, []string{"/m~0n"}, `{"mn":2}`},
	{"~01 is ~1 not slash", `{"~1":1,"/":2,"~/":3}`, []string{"/~01"}, `{"/":2,"~/":3}`},
	{"empty key", `{"":1,"a":2}`, []string{"/"}, `{"a":2}`},
	{"key matched decoded", `{"caf\u00e9":1,"x":2}`, []string{"/café"}, `{"x":2}`},
	{"pointer through array", `{"items":[{"ts":1,"id":"a"},{"ts":2,"id":"b"}]}`, []string{"/items/0/ts"}, `{"items":[{"id":"a"},{"id":"b","ts":2}]}`},
	{"array element", `{"items":[10,20,30]}`, []string{"/items/1"}, `{"items":[10,30]}`},
	{"array elements against original", `{"items":[10,20,30]}`, []string{"/items/0", "/items/1"}, `{"items":[30]}`},
	{"all array elements", `[1,2]`, []string{"/0", "/1"}, `[]`},
	{"last array element", `[1,2]`, []string{"/1"}, `[1]`},
	{"array nested", `[[1,[2,3]]]`, []string{"/0/1/0"}, `[[1,[3]]]`},
	{"numeric key on object", `{"0":1,"1":2}`, []string{"/0"}, `{"1":2}`},
	{"dash names nothing", `{"items":[1,2]}`, []string{"/items/-"}, `{"items":[1,2]}`},
	{"leading zero index names nothing", `{"items":[1,2]}`, []string{"/items/01"}, `{"items":[1,2]}`},
	{"index out of range", `{"items":[1,2]}`, []string{"/items/2", "/items/99999999999"}, `{"items":[1,2]}`},
	{"non-index token on array", `[1,2]`, []string{"/a", "/-1", "/1a"}, `[1,2]`},
	{"missing member", `{"a":1}`, []string{"/nope", "/a/b", "/nope/x"}, `{"a":1}`},
	{"pointer through scalar", `{"a":"str"}`, []string{"/a/0"}, `{"a":"str"}`},
	{"pointer on scalar root", `42`, []string{"/a"}, `42`},
	{"same pointer twice", `{"a":1,"b":2}`, []string{"/a", "/a"}, `{"b":2}`},
	{"pointer inside removed member", `{"a":{"b":1},"c":2}`, []string{"/a", "/a/b"}, `{"c":2}`},
	{"key case matters", `{"A":1,"a":2}`, []string{"/a"}, `{"A":1}`},
	{"prefix key not matched", `{"ab":1,"a":2}`, []string{"/a"}, `{"ab":1}`},
}

func TestAppendIgnore(t *testing.T) {
	t.Parallel()
	for _, tc := range ignoreCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := canon(t, tc.in, tc.ignore...)
			if !ok || got != tc.want {
				t.Errorf("Append(%q, %q) = %q, %v; want %q, true", tc.in, tc.ignore, got, ok, tc.want)
			}
		})
	}
}

func TestAppendZeroPointer(t *testing.T) {
	t.Parallel()
	got, ok := canonjson.Append(nil, []byte(`{"b":1, "a":2}`), []canonjson.Pointer{{}})
	if want := `{"a":2,"b":1}`; !ok || string(got) != want {
		t.Errorf("Append with the zero Pointer = %q, %v; want %q, true", got, ok, want)
	}
}

func TestAppendDst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"valid appends", `{"b":1,"a":2}`, `prefix:{"a":2,"b":1}`, true},
		{"invalid leaves dst", `{"a":1,"a":2}`, `prefix:`, false},
		{"invalid late leaves dst", `{"a":[1,2,3]} x`, `prefix:`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dst := make([]byte, 0, 64)
			dst = append(dst, "prefix:"...)
			got, ok := canonjson.Append(dst, []byte(tc.in), nil)
			if ok != tc.ok || string(got) != tc.want {
				t.Errorf("Append(%q, %q) = %q, %v; want %q, %v", dst, tc.in, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestAppendCrossCheck checks Append against encoding/json: the canonical form
// is valid JSON and decodes to what the input decodes to, minus the ignored
// values.
func TestAppendCrossCheck(t *testing.T) {
	t.Parallel()
	type tcase struct {
		name   string
		in     string
		ignore []string
	}
	var tests []tcase
	for _, tc := range canonCases {
		tests = append(tests, tcase{tc.name, tc.in, nil})
	}
	for _, tc := range ignoreCases {
		tests = append(tests, tcase{"ignore " + tc.name, tc.in, tc.ignore})
	}
	tests = append(tests,
		tcase{"body 1KiB", string(body1K), []string{"/meta/sent_at", "/items/0/added_at"}},
		tcase{"body 64KiB", string(body64K), []string{"/meta/sent_at", "/items/3"}},
	)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := canon(t, tc.in, tc.ignore...)
			if !ok {
				t.Fatalf("Append(%q, %q) ok = false; want true", tc.in, tc.ignore)
			}
			checkSameValue(t, []byte(tc.in), []byte(got), tc.ignore)
		})
	}
}

// checkSameValue reports whether out is valid JSON that decodes (UseNumber)
// to what in decodes to with the values that ignore names removed.
func checkSameValue(t *testing.T, in, out []byte, ignore []string) {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("json.Valid(%q) = false; want true", out)
	}
	want := refRemove(decode(t, in), ignore)
	if got := decode(t, out); !reflect.DeepEqual(got, want) {
		t.Errorf("canonical form %q decodes to %#v; want %#v", out, got, want)
	}
}

func decode(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decoding %q: %v", b, err)
	}
	return v
}

// removed stands for an array element that a pointer removed, until
// refRemove compacts the arrays, so that later pointers still see the
// original indexes.
type removed struct{}

// refRemove is a plain reference implementation of pointer removal on a
// decoded value, independent of the package's.
func refRemove(v any, ignore []string) any {
	for _, p := range ignore {
		if p == "" || p[0] != '/' {
			continue
		}
		toks := strings.Split(p[1:], "/")
		for i, tok := range toks {
			toks[i] = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		}
		cur := v
		for i, tok := range toks {
			last := i == len(toks)-1
			switch c := cur.(type) {
			case map[string]any:
				next, ok := c[tok]
				if !ok {
					break
				}
				if last {
					delete(c, tok)
				}
				cur = next
				continue
			case []any:
				n, err := strconv.Atoi(tok)
				if err != nil || n < 0 || n >= len(c) || strconv.Itoa(n) != tok {
					break
				}
				if last {
					c[n] = removed{}
				}
				cur = c[n]
				continue
			}
			break
		}
	}
	return compact(v)
}

func compact(v any) any {
	switch c := v.(type) {
	case map[string]any:
		for k, e := range c {
			c[k] = compact(e)
		}
	case []any:
		out := make([]any, 0, len(c))
		for _, e := range c {
			if _, ok := e.(removed); !ok {
				out = append(out, compact(e))
			}
		}
		return out
	}
	return v
}

// TestAppendAllocs pins the hot path's allocation budget: with a dst that has
// room and a warm pool, Append allocates nothing.
func TestAppendAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	if testing.Short() {
		t.Skip("allocation counts are flaky in parallel short runs")
	}
	ignore := []canonjson.Pointer{mustPointer(t, "/meta/sent_at"), mustPointer(t, "/items/1/sku")}
	for _, bb := range benchBodies {
		t.Run(bb.name, func(t *testing.T) {
			out := make([]byte, 0, len(bb.body))
			got := testing.AllocsPerRun(100, func() {
				out, _ = canonjson.Append(out[:0], bb.body, ignore)
			})
			if got != 0 {
				t.Errorf("Append allocs = %v; want 0", got)
			}
		})
	}
}
