package redislock

import (
	"testing"

	"github.com/idemgate/idemgate/internal/testutil"
)

// TestLuaReplyCodes: the reply codes named in lua/prelude.lua have the Go
// constants' values, each is defined once, and every script replies with
// them, never with a bare number.
func TestLuaReplyCodes(t *testing.T) {
	t.Parallel()
	testutil.LuaReplyCodes(t, prelude, map[string]int{"HELD": codeHeld, "NOT_HELD": codeNotHeld}, map[string]string{
		"prelude.lua": prelude, "acquire.lua": acquireLua, "renew.lua": renewLua,
		"release.lua": releaseLua, "cleanup.lua": cleanupLua,
	})
}
