package testutil

import (
	"io/fs"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var (
	// luaCode is a reply code's definition: `local NAME = N -- meaning`.
	luaCode = regexp.MustCompile(`(?m)^local ([A-Z_]+) = (\d+) --`)
	// luaReply is a reply, or an array reply's first element.
	luaReply = regexp.MustCompile(`return \{?\s*(-?\d+|[A-Z][A-Z_]*\b)`)
)

// LuaReplyCodes checks a package's embedded Lua scripts, every .lua file
// in files, against the Go constants of their reply codes: the file defs,
// which defines the codes (one `local NAME = N -- meaning` line each),
// defines every name of want once, with want's value, and no other; and no
// script is empty, replies with a bare number where a code belongs, or
// replies with a capitalized name that is not a code. It reports each
// problem with t.Errorf.
func LuaReplyCodes(t testing.TB, files fs.FS, defs string, want map[string]int) {
	t.Helper()
	scripts := map[string]string{}
	err := fs.WalkDir(files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".lua") {
			return err
		}
		b, err := fs.ReadFile(files, path)
		scripts[path] = string(b)
		return err
	})
	if err != nil {
		t.Errorf("reading the Lua: %v", err)
		return
	}
	if _, ok := scripts[defs]; !ok {
		t.Errorf("no Lua file %s among %q", defs, slices.Sorted(maps.Keys(scripts)))
		return
	}
	got := map[string]int{}
	for _, m := range luaCode.FindAllStringSubmatch(scripts[defs], -1) {
		if _, dup := got[m[1]]; dup {
			t.Errorf("the Lua defines %s twice", m[1])
		}
		got[m[1]], _ = strconv.Atoi(m[2])
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[name]; !ok || g != want[name] {
			t.Errorf("the Lua's %s = %d (defined %v); want %d, the Go constant's value", name, g, ok, want[name])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[name]; !ok {
			t.Errorf("the Lua defines code %s, which no Go constant names", name)
		}
	}
	for _, file := range slices.Sorted(maps.Keys(scripts)) {
		s := scripts[file]
		if s == "" {
			t.Errorf("%s is empty", file)
		}
		for _, m := range luaReply.FindAllStringSubmatchIndex(s, -1) {
			code := s[m[2]:m[3]]
			if _, ok := want[code]; ok {
				continue
			}
			what := "a bare number"
			if code[0] != '-' && (code[0] < '0' || code[0] > '9') {
				what = "a name that is not a reply code"
			}
			t.Errorf("%s replies with %s: %q", file, what, s[m[0]:min(len(s), m[1]+20)])
		}
	}
}
