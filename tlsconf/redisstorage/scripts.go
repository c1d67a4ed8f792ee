package redisstorage

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
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

var (
	//go:embed lua/prelude.lua
	prelude string
	//go:embed lua/acquire.lua
	acquireLua string
	//go:embed lua/refresh.lua
	refreshLua string
	//go:embed lua/release.lua
	releaseLua string
	//go:embed lua/store.lua
	storeLua string
	//go:embed lua/delete.lua
	deleteLua string
)

var (
	acquireScript = redis.NewScript(prelude + acquireLua)
	refreshScript = redis.NewScript(prelude + refreshLua)
	releaseScript = redis.NewScript(prelude + releaseLua)
	storeScript   = redis.NewScript(prelude + storeLua)
	deleteScript  = redis.NewScript(prelude + deleteLua)
)
