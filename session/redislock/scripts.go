package redislock

import (
	"embed"

	"github.com/idemgate/idemgate/internal/luascript"
)

// Every step is one of the Lua scripts in lua/, run with EVALSHA (falling
// back to EVAL). Each script is lua/prelude.lua (the reply codes) followed
// by the script's own file, whose top documents its KEYS, ARGV and
// replies. Every key a script touches shares the session's hash tag, so
// each runs on one Cluster slot. PUBLISH takes a channel, not a key, and
// is allowed in scripts.
//
// A reply, or an array reply's first element, is one of the codes below,
// named as in lua/prelude.lua (TestLuaReplyCodes checks the values).
const (
	codeHeld    = 1 // HELD: the caller's token holds the lock (release: held it)
	codeNotHeld = 0 // NOT_HELD: it does not
)

// luaFiles are the scripts; see [luascript.New].
//
//go:embed lua/*.lua
var luaFiles embed.FS

var (
	acquireScript = luascript.New(luaFiles, "acquire")
	renewScript   = luascript.New(luaFiles, "renew")
	releaseScript = luascript.New(luaFiles, "release")
	cleanupScript = luascript.New(luaFiles, "cleanup")
)
