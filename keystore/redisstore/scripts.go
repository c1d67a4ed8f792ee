package redisstore

import "github.com/redis/go-redis/v9"

// Every state transition is one of the Lua scripts below, run with EVALSHA
// (falling back to EVAL when the server's script cache lacks it, e.g. after
// SCRIPT FLUSH or on a newly promoted master). Each script touches only
// KEYS[1], the record, so it runs on that key's Cluster slot.
//
// Every script takes the clock offset in milliseconds as ARGV[1] (always 0
// outside this package's tests) and reads the time with TIME: Redis's clock
// is the one clock for leases, shared by every replica of the proxy.
//
// Scripts answer with an array whose first element is one of the codes
// below; the Go side maps codes to keystore's sentinels.
const (
	codeClaim    = 1 // {1, token, lease end ms, takeover 0|1}
	codeReplay   = 2 // {2, answer}
	codeInFlight = 3
	codeMismatch = 4
	codeNotFound = 5
	codeLost     = 6
	codeCorrupt  = 7 // {7, reason}
	codeOK       = 8 // {8, ...}
	codeRevoked  = 9 // the claim's id has a tombstone: nothing was claimed
)

// prelude is shared by every script: the clock, number helpers and load,
// which reads and validates the record.
//
// Numbers: Lua 5.1 numbers are doubles, exact for integers below 2^53.
// Milliseconds (~1.8e12) and microsecond tokens (~1.8e15) fit with room to
// spare until the year 2255. They are written back with %.0f, never
// tostring (which switches to exponent notation).
const prelude = `
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
  local f = redis.call('HMGET', K, 'v', 'st', 'fp', 'rt', 'tk', 'cl', 'le', 'ex', 'op', 'tko', 'ci', 'fv')
  if f[1] ~= '1' then return false, 'unknown record format' end
  local r = {st = num(f[2]), fp = f[3], rt = f[4], tks = f[5], tk = num(f[5]),
    cl = num(f[6]), le = num(f[7]), ex = num(f[8]), op = f[9], tko = num(f[10]) or 0,
    ci = f[11] or '', fv = f[12] and num(f[12]) or 1}
  if (r.st ~= 1 and r.st ~= 2 and r.st ~= 3) or type(r.fp) ~= 'string' or #r.fp ~= 32 or
      type(r.rt) ~= 'string' or not r.tk or not r.cl or not r.le or not r.ex or not r.fv then
    return false, 'malformed record'
  end
  if NOW >= r.ex then return nil, r end
  return r
end

-- revoked tells whether claim id has a live tombstone ("x" .. id = its end,
-- ms). Call it after load() found a hash or nothing.
local function revoked(id)
  if id == '' then return false end
  local e = num(redis.call('HGET', K, 'x' .. id))
  return e ~= nil and NOW < e
end

-- recreate deletes the record and writes fields (a flat list) in its place,
-- keeping the live claim tombstones, and expires the key at ex (ms) or when
-- the last tombstone ends, whichever is later.
local function recreate(fields, ex)
  local keep = {}
  local last = ex
  if redis.call('EXISTS', K) == 1 then
    for _, name in ipairs(redis.call('HKEYS', K)) do
      if string.sub(name, 1, 1) == 'x' and #name == 17 then
        local e = num(redis.call('HGET', K, name))
        if e and NOW < e then
          keep[#keep + 1] = name
          keep[#keep + 1] = fmt(e)
          if e > last then last = e end
        end
      end
    end
  end
  redis.call('DEL', K)
  redis.call('HSET', K, unpack(fields))
  if #keep > 0 then redis.call('HSET', K, unpack(keep)) end
  redis.call('PEXPIRE', K, fmt(last - NOW))
end
`

// reserveScript: ARGV = offset, fingerprint (32 bytes), route, lease ms,
// retention ms, op (a nonce for this call), claim id (16 bytes), fingerprint
// version (decimal).
//
// A claim's token is max(previous token + 1, Redis time in microseconds):
// it grows within a record's life (the released tombstone keeps the
// previous token), and it still never repeats for a key after the record
// expired or was lost in a failover, unless Redis's clock went back by more
// than that.
//
// op makes the script safe to run twice (go-redis may resend a command
// after a network error): a claim that finds its own op returns itself. A
// claim whose id was released (releaseClaimScript) before it arrived
// changes nothing.
//
// Replies: {1, token, lease end, takeover, claimed, expires},
// {2, answer, fingerprint version, ms the record still lives},
// {4, fingerprint version}, {3}, {9}.
var reserveScript = redis.NewScript(prelude + `
local fp, rt, lease, ret, op, ci, fv = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8])
local r, stale = load()
if r == false then return {7, stale} end
if revoked(ci) then return {9} end
if r and r.st ~= 3 then
  if r.st == 1 and r.op == op then return {1, r.tk, r.le, r.tko, r.cl, r.ex} end
  if r.fv ~= fv or r.fp ~= fp then return {4, r.fv} end
  if r.st == 2 then
    local a = redis.call('HGET', K, 'ans')
    if not a then return {7, 'completed record without an answer'} end
    return {2, a, r.fv, r.ex - NOW}
  end
  if NOW < r.le then return {3} end
  local tk = math.max(r.tk + 1, NOWUS)
  local le = NOW + lease
  local ex = math.max(r.ex, NOW + ret)
  redis.call('HSET', K, 'tk', fmt(tk), 'cl', fmt(NOW), 'le', fmt(le), 'ex', fmt(ex), 'rt', rt, 'op', op, 'tko', '1', 'ci', ci)
  if redis.call('PTTL', K) < ex - NOW then redis.call('PEXPIRE', K, fmt(ex - NOW)) end
  return {1, tk, le, 1, NOW, ex}
end
local prev = r or stale
local tk = NOWUS
if prev and prev.tk >= tk then tk = prev.tk + 1 end
local le, ex = NOW + lease, NOW + ret
recreate({'v', '1', 'st', '1', 'fp', fp, 'rt', rt, 'tk', fmt(tk), 'cl', fmt(NOW),
  'le', fmt(le), 'ex', fmt(ex), 'op', op, 'tko', '0', 'ci', ci, 'fv', fmt(fv)}, ex)
return {1, tk, le, 0, NOW, ex}
`)

// completeClaimScript: ARGV = offset, claim id, token, answer, op,
// fingerprint, fingerprint version, route, claimed ms, expires ms. Replies
// {8, 1} completed (or already completed by this claim), {8, 2} recreated
// (the record had vanished), {8, 3} expired (vanished, past expires:
// nothing stored), {6} another claim holds the key.
var completeClaimScript = redis.NewScript(prelude + `
local ci, tok, ans, op = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local fp, fv, rt, cl, ex = ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10])
local r, stale = load()
if r == false then return {7, stale} end
if not r then
  if revoked(ci) then return {6} end
  if NOW >= ex then return {8, 3} end
  recreate({'v', '1', 'st', '2', 'fp', fp, 'rt', rt, 'tk', tok, 'cl', fmt(cl), 'le', '0',
    'ex', fmt(ex), 'op', op, 'tko', '0', 'ci', ci, 'fv', fv, 'ans', ans}, ex)
  return {8, 2}
end
if r.ci ~= ci or r.tks ~= tok then return {6} end
if r.st == 2 then return {8, 1} end
if r.st ~= 1 then return {6} end
redis.call('HSET', K, 'st', '2', 'ans', ans, 'le', '0', 'op', op)
return {8, 1}
`)

// releaseClaimScript: ARGV = offset, claim id, lease ms. A record in flight
// under the id is released (a tombstone, as releaseScript leaves); in every
// case the id gets a tombstone field that ends a lease from now, and the
// key lives at least that long. A tombstone-only hash is a released record
// with a zero fingerprint and token. Reply {8, 1} if a claim was released,
// {8, 0} if not.
var releaseClaimScript = redis.NewScript(prelude + `
local ci, lease = ARGV[2], tonumber(ARGV[3])
local r, stale = load()
if r == false then return {7, stale} end
local released = 0
if r and r.st == 1 and r.ci == ci then
  redis.call('HSET', K, 'st', '3', 'le', '0', 'ci', '')
  released = 1
elseif not r and not stale then
  redis.call('HSET', K, 'v', '1', 'st', '3', 'fp', string.rep('\0', 32), 'rt', '', 'tk', '0',
    'cl', fmt(NOW), 'le', '0', 'ex', fmt(NOW + lease), 'tko', '0')
end
local old = num(redis.call('HGET', K, 'x' .. ci))
if not old or old < NOW + lease then redis.call('HSET', K, 'x' .. ci, fmt(NOW + lease)) end
local ttl = redis.call('PTTL', K)
if ttl < lease then redis.call('PEXPIRE', K, fmt(lease)) end
return {8, released}
`)

// completeScript: ARGV = offset, token ("" with force), answer, op, force
// ("1" ignores the token: Admin.ForceComplete).
var completeScript = redis.NewScript(prelude + `
local tok, ans, op, force = ARGV[2], ARGV[3], ARGV[4], ARGV[5] == '1'
local r, why = load()
if r == false then return {7, why} end
if not r then return {5} end
if r.st == 2 and r.op == op and (force or r.tks == tok) then return {8} end
if r.st ~= 1 or (not force and r.tks ~= tok) then return {6} end
redis.call('HSET', K, 'st', '2', 'ans', ans, 'le', '0', 'op', op)
if force then redis.call('HSET', K, 'ci', '') end
return {8}
`)

// releaseScript: ARGV = offset, token, op, force. The record stays as a
// released tombstone (answer cleared, token kept) until it expires.
var releaseScript = redis.NewScript(prelude + `
local tok, op, force = ARGV[2], ARGV[3], ARGV[4] == '1'
local r, why = load()
if r == false then return {7, why} end
if not r then return {5} end
if r.st == 3 and r.op == op and (force or r.tks == tok) then return {8} end
if r.st ~= 1 or (not force and r.tks ~= tok) then return {6} end
redis.call('HSET', K, 'st', '3', 'le', '0', 'op', op, 'ci', '')
redis.call('HDEL', K, 'ans')
return {8}
`)

// renewScript: ARGV = offset, token, lease ms. The lease never ends after
// the record expires, and never moves back.
var renewScript = redis.NewScript(prelude + `
local tok, lease = ARGV[2], tonumber(ARGV[3])
local r, why = load()
if r == false then return {7, why} end
if not r then return {5} end
if r.st ~= 1 or r.tks ~= tok then return {6} end
local e = math.min(NOW + lease, r.ex)
if e > r.le then
  redis.call('HSET', K, 'le', fmt(e))
  r.le = e
end
return {8, r.le}
`)

// getScript: ARGV = offset. Read-only.
var getScript = redis.NewScript(prelude + `
local r, why = load()
if r == false then return {7, why} end
if not r then return {5} end
local a = ''
if r.st == 2 then
  a = redis.call('HGET', K, 'ans')
  if not a then return {7, 'completed record without an answer'} end
end
return {8, r.st, r.fp, r.rt, r.tk, r.cl, r.le, r.ex, a, r.ci, r.fv}
`)

// The scripts with their digests boxed once (call.go).
var (
	reserveLua       = newLua(reserveScript)
	completeClaimLua = newLua(completeClaimScript)
	releaseClaimLua  = newLua(releaseClaimScript)
	completeLua      = newLua(completeScript)
	releaseLua       = newLua(releaseScript)
	renewLua         = newLua(renewScript)
	getLua           = newLua(getScript)
)
