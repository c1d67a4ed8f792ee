package redisstore

import (
	"embed"
	"testing"

	"github.com/idemgate/idemgate/internal/testutil"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// TestLuaReplyCodes: the reply codes named in lua/prelude.lua have the Go
// constants' values, each is defined once, and no script in lua/ replies
// with a bare number where a code belongs.
func TestLuaReplyCodes(t *testing.T) {
	t.Parallel()
	testutil.LuaReplyCodes(t, luaFiles, "lua/prelude.lua", map[string]int{
		"CLAIM": codeClaim, "REPLAY": codeReplay, "IN_FLIGHT": codeInFlight, "MISMATCH": codeMismatch,
		"NOT_FOUND": codeNotFound, "LOST": codeLost, "CORRUPT": codeCorrupt, "OK": codeOK,
		"REVOKED": codeRevoked, "UNKNOWN": codeUnknown, "NEED_ANSWER": codeNeedAnswer,
	})
}
