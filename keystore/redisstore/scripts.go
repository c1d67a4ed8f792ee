package redisstore

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/keystore"
)

// Every state transition is one of the Lua scripts in lua/. Each script is
// lua/prelude.lua (the reply codes, the clock, reading and writing a record
// in either [RecordFormat]) followed by the script's own file, whose top
// documents its ARGV and replies. Each script touches only its KEYS: the
// record, KEYS[1], and for complete_claim_moved.lua the answer's scratch
// key, KEYS[2], which shares the record's hash tag; so each runs on the
// record's Cluster slot.
//
// A script runs as a function of the store's [library] (FCALL, Redis 7), or
// with EVALSHA (falling back to EVAL when the server's script cache lacks
// it, e.g. after SCRIPT FLUSH or on a newly promoted master) where Redis
// refuses functions: see [Store.functionRefused]. Both run the same code
// on the same arguments.
//
// An answer goes into a script's arguments only where it must: this
// Redis's Lua (7.0) hashes every byte of every string it makes, so a 4.5 KB
// answer cost complete_claim.lua ~40 µs of Redis CPU more than a 10-byte
// one (twice: ARGV and save's concatenation), where a plain SET of it costs
// ~2 µs. CompleteClaim therefore SETs an answer of 4 KB or more at a
// scratch key and has complete_claim_moved.lua rename it into place (see
// [Store.CompleteClaim]; BENCHMARKS.md, "Redis's Lua and big strings":
// measured by the server's whole CPU, the saving is ~5 µs at 4.5 KB and
// ~140 µs at 45 KB, against a command more).
//
// Every script takes the clock offset in milliseconds as ARGV[1] (always 0
// outside this package's tests) and reads the time with TIME: Redis's clock
// is the one clock for leases, shared by every replica of the proxy.
//
// Scripts answer with an array whose first element is one of the codes
// below, named as in lua/prelude.lua (TestLuaReplyCodes checks the values);
// the Go side maps codes to keystore's sentinels.
const (
	codeClaim    = 1  // CLAIM: {1, token, lease end ms, takeover 0|1, claimed, expires}
	codeReplay   = 2  // REPLAY: {2, answer, fingerprint version, ms left}
	codeInFlight = 3  // IN_FLIGHT
	codeMismatch = 4  // MISMATCH: {4, fingerprint version}
	codeNotFound = 5  // NOT_FOUND
	codeLost     = 6  // LOST
	codeCorrupt  = 7  // CORRUPT: {7, reason}
	codeOK       = 8  // OK: {8, ...}
	codeRevoked  = 9  // REVOKED: the claim's id has a tombstone, nothing was claimed
	codeUnknown  = 10 // UNKNOWN: {10, marked 0|1, info}, the record's outcome is unknown
	// NEED_ANSWER: complete_claim_moved could not move the answer from its
	// scratch key; nothing changed (see [Store.CompleteClaim]).
	codeNeedAnswer = 11
)

var (
	//go:embed lua/prelude.lua
	prelude string
	//go:embed lua/reserve.lua
	reserveScript string
	//go:embed lua/complete_claim.lua
	completeClaimScript string
	//go:embed lua/complete_claim_moved.lua
	completeClaimMovedScript string
	//go:embed lua/release_claim.lua
	releaseClaimScript string
	//go:embed lua/complete.lua
	completeScript string
	//go:embed lua/release.lua
	releaseScript string
	//go:embed lua/renew.lua
	renewScript string
	//go:embed lua/get.lua
	getScript string
	//go:embed lua/mark_sent.lua
	markSentScript string
	//go:embed lua/mark_unknown.lua
	markUnknownScript string
	//go:embed lua/resolve.lua
	resolveScript string
)

// RecordFormat is the layout a [Store] writes its records in. Every Store
// reads both.
type RecordFormat int

const (
	// FormatCompact stores a record as one string: about half the work
	// for Redis per keyed write, and less memory, than FormatHash. The
	// first release (0.1.0) cannot read it.
	FormatCompact RecordFormat = iota
	// FormatHash stores a record as the first release's hash, which its
	// replicas read: for a rolling upgrade from 0.1.0.
	FormatHash
)

// String returns the format's name in the configuration.
func (f RecordFormat) String() string {
	if f == FormatHash {
		return "hash"
	}
	return "compact"
}

// scripts are the scripts of one record format, with their digests boxed
// once (call.go), and the same scripts as the functions of one library.
type scripts struct {
	format                                                              RecordFormat
	reserve, completeClaim, releaseClaim, complete, release, renew, get lua
	completeClaimMoved, markSent, markUnknown, resolve                  lua
	lib                                                                 *library
}

// A library is the scripts of one record format as Redis Functions
// (Redis 7): FUNCTION LOAD runs the prelude once, where every EVAL runs it
// again (its thirteen closures and tables: about a sixth of a keyed write's
// time in Redis, BENCHMARKS.md). Its name and its functions' names carry
// a digest of its code, so that two releases of idemgate sharing a Redis
// (a rolling upgrade) never replace each other's functions: each loads
// its own library beside the other's.
type library struct {
	name string // idemgate_ and the digest's first 16 hex digits
	code string // FUNCTION LOAD's argument
}

func newScripts(f RecordFormat) *scripts {
	compact := "false"
	if f == FormatCompact {
		compact = "true"
	}
	p := strings.Replace(prelude, "{{compact}}", compact, 1)
	type src struct {
		dst  *lua
		name string
		body string
		// readOnly registers the function with the no-writes flag: Redis
		// refuses a function that may write whole when it is over
		// maxmemory, and get.lua, which only reads, must still run then.
		readOnly bool
	}
	sc := &scripts{format: f}
	srcs := []src{
		{&sc.reserve, "reserve", reserveScript, false},
		{&sc.completeClaim, "complete_claim", completeClaimScript, false},
		{&sc.completeClaimMoved, "complete_claim_moved", completeClaimMovedScript, false},
		{&sc.releaseClaim, "release_claim", releaseClaimScript, false},
		{&sc.complete, "complete", completeScript, false},
		{&sc.release, "release", releaseScript, false},
		{&sc.renew, "renew", renewScript, false},
		{&sc.get, "get", getScript, true},
		{&sc.markSent, "mark_sent", markSentScript, false},
		{&sc.markUnknown, "mark_unknown", markUnknownScript, false},
		{&sc.resolve, "resolve", resolveScript, false},
	}
	// The library is made with a placeholder for its name, which is then
	// the digest of all of it (the prelude, every script, and how each is
	// registered): two releases share a name only if they load the same
	// code.
	const placeholder = "{{library}}"
	var code strings.Builder
	code.WriteString("#!lua name=" + placeholder + "\n" + p + "\n")
	for i := range srcs {
		s := &srcs[i]
		s.body = strings.ReplaceAll(s.body, "{{lapsed}}", strconv.Itoa(int(keystore.CauseLapsed)))
		flags := "{}"
		if s.readOnly {
			flags = "{'no-writes'}"
		}
		fmt.Fprintf(&code, "redis.register_function{function_name = '%s_%s', flags = %s, callback = function(KEYS, ARGV)\nbegin(KEYS, ARGV)\n%s\nend}\n", placeholder, s.name, flags, s.body)
	}
	digest := sha1.Sum([]byte(code.String()))
	name := "idemgate_" + hex.EncodeToString(digest[:])[:16]
	sc.lib = &library{name: name, code: strings.ReplaceAll(code.String(), placeholder, name)}
	for _, s := range srcs {
		script := redis.NewScript(p + "begin(KEYS, ARGV)\n" + s.body)
		*s.dst = lua{script: script, sha: script.Hash(), fn: name + "_" + s.name, lib: sc.lib}
	}
	return sc
}

// headLen is the length of a compact record's header without tombstones
// (prelude.lua's head): HEAD's fixed fields (magic, state, fingerprint
// version, takeover flag, four doubles, the fingerprint, the tombstone
// count and the three strings' 16-bit lengths) and the route, op and claim
// id.
func headLen(route, op, claimID int) int {
	return 4 + 3 + 4*8 + 32 + 2 + 3*2 + route + op + claimID
}

var formatScripts = [...]*scripts{FormatCompact: newScripts(FormatCompact), FormatHash: newScripts(FormatHash)}
