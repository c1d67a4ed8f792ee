package testutil

import (
	"strings"
	"testing"
	"testing/fstest"
)

// LuaReplyCodes passes Lua whose codes match the Go constants and whose
// scripts reply with them, and reports each way they can part.
func TestLuaReplyCodes(t *testing.T) {
	t.Parallel()
	const defs = "local OK = 1 -- done\nlocal NOT_HELD = 0 -- not held\n"
	want := map[string]int{"OK": 1, "NOT_HELD": 0}
	good := "if x then return OK end\nreturn {NOT_HELD, 5}"
	for _, tt := range []struct {
		name    string
		defs    string
		scripts map[string]string
		want    []string // each a reported message's start, in order
	}{
		{"matching", defs, map[string]string{"a.lua": good}, nil},
		{"other value", strings.Replace(defs, "OK = 1", "OK = 2", 1), map[string]string{"a.lua": good},
			[]string{"the Lua's OK = 2 (defined true); want 1"}},
		{"missing", "local OK = 1 -- done\n", map[string]string{"a.lua": good},
			[]string{"the Lua's NOT_HELD = 0 (defined false); want 0"}},
		{"extra", defs + "local LOST = 6 -- lost\n", map[string]string{"a.lua": good},
			[]string{"the Lua defines code LOST, which no Go constant names"}},
		{"twice", defs + "local OK = 1 -- again\n", map[string]string{"a.lua": good},
			[]string{"the Lua defines OK twice"}},
		{"bare numbers", defs, map[string]string{"a.lua": "return 1", "b.lua": "return {0, left}", "c.lua": "return { -1 }"},
			[]string{`lua/a.lua replies with a bare number: "return 1"`, `lua/b.lua replies with a bare number: "return {0, left}"`, `lua/c.lua replies with a bare number`}},
		{"unknown name", defs, map[string]string{"a.lua": "return {HELD, 1}"},
			[]string{`lua/a.lua replies with a name that is not a reply code: "return {HELD, 1}"`}},
		{"empty", defs, map[string]string{"a.lua": ""}, []string{"lua/a.lua is empty"}},
		{"no defs", "", map[string]string{"a.lua": good}, []string{"the Lua's NOT_HELD", "the Lua's OK", "lua/prelude.lua is empty"}},
		{"lower-case names and calls are no codes", defs, map[string]string{"a.lua": "return r\nreturn redis.call('DEL', k)\nreturn {ok, v}"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			files := fstest.MapFS{"lua/prelude.lua": {Data: []byte(tt.defs)}, "lua/README": {Data: []byte("return 1")}}
			for name, s := range tt.scripts {
				files["lua/"+name] = &fstest.MapFile{Data: []byte(s)}
			}
			r := &fatalRecorder{TB: t}
			LuaReplyCodes(r, files, "lua/prelude.lua", want)
			if len(r.msgs) != len(tt.want) {
				t.Fatalf("reported %q; want %d messages starting %q", r.msgs, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(r.msgs[i], w) {
					t.Errorf("message %d = %q; want it to start %q", i, r.msgs[i], w)
				}
			}
		})
	}
	t.Run("no defs file", func(t *testing.T) {
		t.Parallel()
		r := &fatalRecorder{TB: t}
		LuaReplyCodes(r, fstest.MapFS{"lua/a.lua": {Data: []byte(good)}}, "lua/codes.lua", want)
		if len(r.msgs) != 1 || !strings.HasPrefix(r.msgs[0], `no Lua file lua/codes.lua among ["lua/a.lua"]`) {
			t.Errorf("reported %q; want that lua/codes.lua is missing", r.msgs)
		}
	})
}
