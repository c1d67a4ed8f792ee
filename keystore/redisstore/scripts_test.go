package redisstore

import (
	"regexp"
	"strconv"
	"testing"
)

// TestLuaReplyCodes: the reply codes named in lua/prelude.lua have the Go
// constants' values, each is defined once, and no script replies with a
// bare number where a code belongs.
func TestLuaReplyCodes(t *testing.T) {
	t.Parallel()
	want := map[string]int{
		"CLAIM": codeClaim, "REPLAY": codeReplay, "IN_FLIGHT": codeInFlight, "MISMATCH": codeMismatch,
		"NOT_FOUND": codeNotFound, "LOST": codeLost, "CORRUPT": codeCorrupt, "OK": codeOK,
		"REVOKED": codeRevoked, "UNKNOWN": codeUnknown,
	}
	got := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^local ([A-Z_]+) = (\d+) --`).FindAllStringSubmatch(prelude, -1) {
		if _, dup := got[m[1]]; dup {
			t.Errorf("prelude.lua defines %s twice", m[1])
		}
		got[m[1]], _ = strconv.Atoi(m[2])
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("prelude.lua: %s = %d (defined %v); want %d as in scripts.go", name, g, ok, v)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("prelude.lua defines code %s, which scripts.go does not name", name)
		}
	}
	bare := regexp.MustCompile(`return \{\d`)
	for name, s := range map[string]string{
		"reserve": reserveScript, "complete_claim": completeClaimScript, "release_claim": releaseClaimScript,
		"complete": completeScript, "release": releaseScript, "renew": renewScript, "get": getScript,
		"mark_sent": markSentScript, "mark_unknown": markUnknownScript, "resolve": resolveScript, "prelude": prelude,
	} {
		if s == "" {
			t.Errorf("%s.lua is empty", name)
		}
		if loc := bare.FindStringIndex(s); loc != nil {
			t.Errorf("%s.lua replies with a bare number: %q", name, s[loc[0]:min(len(s), loc[1]+20)])
		}
	}
}
