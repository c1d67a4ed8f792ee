package redisstorage

import (
	"embed"

	"github.com/idemgate/idemgate/internal/luascript"
)

// Every write and every lock step is one of the Lua scripts in lua/, run
// with EVALSHA (falling back to EVAL). Each script is lua/prelude.lua (the
// reply codes) followed by the script's own file, whose top documents its
// KEYS, ARGV and reply. A script touches only keys of one Storage, which
// share its hash tag, so it runs on one Cluster slot.
//
// Every script replies with one of the codes below, named as in
// lua/prelude.lua (TestLuaReplyCodes checks the values).
const (
	codeOK      = 1 // OK: done (the lock is held or was released; the value written or deleted)
	codeNotHeld = 0 // NOT_HELD: the caller's token does not hold the lock
)

// luaFiles are the scripts; see [luascript.New].
//
//go:embed lua/*.lua
var luaFiles embed.FS

var (
	acquireScript = luascript.New(luaFiles, "acquire")
	refreshScript = luascript.New(luaFiles, "refresh")
	releaseScript = luascript.New(luaFiles, "release")
	storeScript   = luascript.New(luaFiles, "store")
	deleteScript  = luascript.New(luaFiles, "delete")
)
