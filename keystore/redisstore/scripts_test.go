package redisstore

import (
	"testing"

	"github.com/idemgate/idemgate/internal/testutil"
)

// TestLuaReplyCodes: the reply codes named in lua/prelude.lua have the Go
// constants' values, each is defined once, and no script replies with a
// bare number where a code belongs.
func TestLuaReplyCodes(t *testing.T) {
	t.Parallel()
	testutil.LuaReplyCodes(t, prelude, map[string]int{
		"CLAIM": codeClaim, "REPLAY": codeReplay, "IN_FLIGHT": codeInFlight, "MISMATCH": codeMismatch,
		"NOT_FOUND": codeNotFound, "LOST": codeLost, "CORRUPT": codeCorrupt, "OK": codeOK,
		"REVOKED": codeRevoked, "UNKNOWN": codeUnknown,
	}, map[string]string{
		"reserve.lua": reserveScript, "complete_claim.lua": completeClaimScript, "release_claim.lua": releaseClaimScript,
		"complete.lua": completeScript, "release.lua": releaseScript, "renew.lua": renewScript, "get.lua": getScript,
		"mark_sent.lua": markSentScript, "mark_unknown.lua": markUnknownScript, "resolve.lua": resolveScript, "prelude.lua": prelude,
	})
}
