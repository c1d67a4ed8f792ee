package redislimiter

import (
	"embed"

	"github.com/idemgate/idemgate/internal/luascript"
)

// Every decision is one of the Lua scripts in lua/, run with EVALSHA
// (go-redis falls back to EVAL when the server's script cache lacks it,
// e.g. after SCRIPT FLUSH or on a newly promoted master). Each script is
// lua/prelude.lua (the reply codes, the clock, exact division) followed by
// the script's own file, whose top documents its keys, ARGV and replies. A
// script touches only keys that share its client's hash tag, so it runs on
// one Cluster slot.
//
// Time is Redis's TIME in microseconds: one clock for every replica of the
// proxy. ARGV[1] is empty, except in this package's tests, which pass the
// time instead (see export_test.go); Redis still expires keys on its own
// clock then, so the keys' lifetimes get an hour's margin in that case.
//
// Numbers: Lua 5.1 numbers are doubles, exact for integers below 2^53. The
// constructors keep every level and time below 2^52 (microseconds since 1970
// are about 1.8e15), and fdiv/cdiv correct the rounding of a/b, so the
// arithmetic is exact integer arithmetic, as in package limiter. Numbers are
// written with %.0f, never tostring (which switches to exponent notation).
//
// Every script answers {code, remaining, reset µs, retry after µs}, its
// code one of the constants below, named as in lua/prelude.lua
// (TestLuaReplyCodes checks the values).
const (
	codeOK      = 1 // OK: the request passes
	codeRefused = 0 // REFUSED: the request is refused
)

// luaFiles are the scripts; see [luascript.New].
//
//go:embed lua/*.lua
var luaFiles embed.FS

var (
	// gcraScript is limiter's gcra (nginx's limit_req arithmetic); see
	// lua/gcra.lua.
	gcraScript = luascript.New(luaFiles, "gcra")
	// windowScript is limiter's window (a sliding log with a block); see
	// lua/window.lua.
	windowScript = luascript.New(luaFiles, "window")
)
