package redislock

import (
	"testing"

	"github.com/idemgate/idemgate/internal/testutil"
)

// TestLuaReplyCodes: the reply codes named in lua/prelude.lua have the Go
// constants' values, each is defined once, and every script in lua/
// replies with them, never with a bare number.
func TestLuaReplyCodes(t *testing.T) {
	t.Parallel()
	testutil.LuaReplyCodes(t, luaFiles, "lua/prelude.lua", map[string]int{"HELD": codeHeld, "NOT_HELD": codeNotHeld})
}
