package redisstore

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemgate/idemgate/internal/redistest"
	"github.com/idemgate/idemgate/keystore"
	"github.com/idemgate/idemgate/keystore/storetest"
)

// The first release's prelude, reserve and get scripts, verbatim (commit
// 768a101), to check that replicas still running it during a rolling
// upgrade read every record this release writes.
const firstPrelude = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local K = KEYS[1]
local OFF = tonumber(ARGV[1])
local T = redis.call('TIME')
local NOW = tonumber(T[1]) * 1000 + math.floor(tonumber(T[2]) / 1000) + OFF
local NOWUS = tonumber(T[1]) * 1000000 + tonumber(T[2]) + OFF * 1000

local function num(s)
  if type(s) ~= 'string' or not string.match(s, '^%d+$') then return nil end
  return tonumber(s)
end
local function fmt(n) return string.format('%.0f', n) end

-- load returns the record; or nil (absent or expired) and, when expired, the
-- stale record (for its token); or false and the reason it is corrupt.
local function load()
  local ty = redis.call('TYPE', K)['ok']
  if ty == 'none' then return nil end
  if ty ~= 'hash' then return false, 'value is a ' .. ty .. ', not a hash' end
  local f = redis.call('HMGET', K, 'v', 'st', 'fp', 'rt', 'tk', 'cl', 'le', 'ex', 'op', 'tko')
  if f[1] ~= '1' then return false, 'unknown record format' end
  local r = {st = num(f[2]), fp = f[3], rt = f[4], tks = f[5], tk = num(f[5]),
    cl = num(f[6]), le = num(f[7]), ex = num(f[8]), op = f[9], tko = num(f[10]) or 0}
  if (r.st ~= 1 and r.st ~= 2 and r.st ~= 3) or type(r.fp) ~= 'string' or #r.fp ~= 32 or
      type(r.rt) ~= 'string' or not r.tk or not r.cl or not r.le or not r.ex then
    return false, 'malformed record'
  end
  if NOW >= r.ex then return nil, r end
  return r
end
`

var firstReserveScript = redis.NewScript(firstPrelude + `
local fp, rt, lease, ret, op = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local r, stale = load()
if r == false then return {7, stale} end
if r and r.st ~= 3 then
  if r.st == 1 and r.op == op then return {1, r.tk, r.le, r.tko} end
  if r.fp ~= fp then return {4} end
  if r.st == 2 then
    local a = redis.call('HGET', K, 'ans')
    if not a then return {7, 'completed record without an answer'} end
    return {2, a}
  end
  if NOW < r.le then return {3} end
  local tk = math.max(r.tk + 1, NOWUS)
  local le = NOW + lease
  local ex = math.max(r.ex, NOW + ret)
  redis.call('HSET', K, 'tk', fmt(tk), 'cl', fmt(NOW), 'le', fmt(le), 'ex', fmt(ex), 'rt', rt, 'op', op, 'tko', '1')
  redis.call('PEXPIRE', K, fmt(ex - NOW))
  return {1, tk, le, 1}
end
local prev = r or stale
local tk = NOWUS
if prev and prev.tk >= tk then tk = prev.tk + 1 end
local le, ex = NOW + lease, NOW + ret
redis.call('DEL', K)
redis.call('HSET', K, 'v', '1', 'st', '1', 'fp', fp, 'rt', rt, 'tk', fmt(tk), 'cl', fmt(NOW),
  'le', fmt(le), 'ex', fmt(ex), 'op', op, 'tko', '0')
redis.call('PEXPIRE', K, fmt(ret))
return {1, tk, le, 0}
`)

var firstGetScript = redis.NewScript(firstPrelude + `
local r, why = load()
if r == false then return {7, why} end
if not r then return {5} end
local a = ''
if r.st == 2 then
  a = redis.call('HGET', K, 'ans')
  if not a then return {7, 'completed record without an answer'} end
end
return {8, r.st, r.fp, r.rt, r.tk, r.cl, r.le, r.ex, a}
`)

// A store writing FormatHash writes records the first release reads.
// (FormatCompact ones it cannot: see RecordFormat.)
func TestFirstReleaseReadsNewRecords(t *testing.T) {
	t.Parallel()
	c := newClient(t, redistest.Standalone)
	s := newStoreOpts(t, c, Options{KeyPrefix: redistest.Prefix(t), RecordFormat: FormatHash})
	ctx := t.Context()
	fp := keystore.Fingerprint(keystore.NewKey("fp", "a"))
	firstGet := func(k keystore.Key) []any {
		t.Helper()
		v, err := firstGetScript.Run(ctx, c, []string{s.key(k)}, 0).Result()
		if err != nil {
			t.Fatalf("first release's get = %v", err)
		}
		return v.([]any)
	}
	firstReserve := func(k keystore.Key) []any {
		t.Helper()
		v, err := firstReserveScript.Run(ctx, c, []string{s.key(k)}, 0, string(fp[:]), "route_a", 2000, 10000, "op-old").Result()
		if err != nil {
			t.Fatalf("first release's reserve = %v", err)
		}
		return v.([]any)
	}
	o := claimOpts("a", keystore.NewClaimID())

	inFlight := storetest.NewTestKey(t)
	if _, err := s.Reserve(ctx, inFlight, o); err != nil {
		t.Fatal(err)
	}
	completed := storetest.NewTestKey(t)
	res, err := s.Reserve(ctx, completed, claimOpts("a", keystore.NewClaimID()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CompleteClaim(ctx, completed, res.Claim, &keystore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	recreated := storetest.NewTestKey(t)
	if _, err := s.CompleteClaim(ctx, recreated, res.Claim, &keystore.Response{Status: 201}); err != nil {
		t.Fatal(err)
	}
	tombstone := storetest.NewTestKey(t)
	if err := s.ReleaseClaim(ctx, tombstone, keystore.NewClaimID(), time.Minute); err != nil {
		t.Fatal(err)
	}
	releasedClaim := storetest.NewTestKey(t)
	id := keystore.NewClaimID()
	if _, err := s.Reserve(ctx, releasedClaim, claimOpts("a", id)); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseClaim(ctx, releasedClaim, id, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		k    keystore.Key
		st   int64
	}{
		{"in flight", inFlight, 1},
		{"completed", completed, 2},
		{"recreated", recreated, 2},
		{"claim tombstone only", tombstone, 3},
		{"released by claim id", releasedClaim, 3},
	} {
		got := firstGet(tc.k)
		if got[0] != int64(codeOK) || got[1] != tc.st {
			t.Errorf("%s: the first release's get = %v; want OK, state %d", tc.name, got, tc.st)
		}
	}
	if got := firstReserve(completed); got[0] != int64(codeReplay) {
		t.Errorf("the first release's reserve of a completed record = %v; want a replay", got)
	}
	if got := firstReserve(tombstone); got[0] != int64(codeClaim) {
		t.Errorf("the first release's reserve over a claim tombstone = %v; want a claim", got)
	}
	if got := firstReserve(inFlight); got[0] != int64(codeInFlight) {
		t.Errorf("the first release's reserve of a claim in flight = %v; want in flight", got)
	}
}
