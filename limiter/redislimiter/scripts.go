package redislimiter

import "github.com/redis/go-redis/v9"

// Every decision is one of the Lua scripts below, run with EVALSHA (go-redis
// falls back to EVAL when the server's script cache lacks it, e.g. after
// SCRIPT FLUSH or on a newly promoted master). A script touches only keys
// that share its client's hash tag, so it runs on one Cluster slot.
//
// Time is Redis's TIME in microseconds: one clock for every replica of the
// proxy. ARGV[1] is empty, except in this package's tests, which pass the
// time instead (see export_test.go); Redis still expires keys on its own
// clock then, so the keys' lifetimes get an hour's margin in that case.
//
// Numbers: Lua 5.1 numbers are doubles, exact for integers below 2^53. The
// constructors keep every level and time below 2^52 (microseconds since 1970
// are about 1.8e15), and fdiv/cdiv correct the rounding of a/b, so the
// arithmetic is exact integer arithmetic, as in package limiter. Numbers are
// written with %.0f, never tostring (which switches to exponent notation).
//
// Every script answers {ok (1 or 0), remaining, reset µs, retry after µs}.
const prelude = `
-- Redis 3.2 to 4: replicate the script's effects, not the script, since it
-- reads TIME (the default from Redis 5 on).
if redis.replicate_commands then pcall(redis.replicate_commands) end
local NOW
local TTLPAD = 0
if ARGV[1] ~= '' then
  NOW = tonumber(ARGV[1])
  TTLPAD = 3600000
else
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function cdiv(a, b)
  local q = fdiv(a, b)
  if q * b < a then q = q + 1 end
  return q
end
local function fmt(n) return string.format('%.0f', n) end
-- ttl returns the lifetime in ms of state that equals a fresh one at µs.
local function ttl(at) return math.max(cdiv(at - NOW, 1000), 1) + TTLPAD end
`

// gcraScript is limiter's gcra (nginx's limit_req arithmetic) in
// microseconds: KEYS[1] holds "level last unit drain" (units, µs, and the
// parameters the level was counted in). A request adds unit to the level, the
// level drains by drain units per µs, and a request passes when the level it
// would reach is at most max. A refused request changes nothing. The key
// lives until the level is 0 again, so an expired key equals a fresh one; a
// value counted in other units (the limit changed) or foreign to this
// script counts as fresh.
//
// ARGV: now, unit, drain, max (capacity × unit), capacity.
var gcraScript = redis.NewScript(prelude + `
local K = KEYS[1]
local UNIT, DRAIN, MAX, CAP = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local level, last, found = 0, NOW, false
local ok, v = pcall(redis.call, 'GET', K)
if ok and v then
  local l, t, u, d = string.match(v, '^(%d+) (%d+) (%d+) (%d+)$')
  if l and tonumber(u) == UNIT and tonumber(d) == DRAIN then
    level, last, found = tonumber(l), tonumber(t), true
  end
end
local d = NOW - last
if d > 0 then
  if d >= cdiv(level, DRAIN) then level = 0 else level = level - DRAIN * d end
end
local nxt = level + UNIT
if nxt > MAX then
  local wait = cdiv(nxt - MAX, DRAIN)
  return {0, 0, wait, wait}
end
if not found or NOW > last then last = NOW end
redis.call('SET', K, fmt(nxt) .. ' ' .. fmt(last) .. ' ' .. fmt(UNIT) .. ' ' .. fmt(DRAIN),
  'PX', ttl(last + cdiv(nxt, DRAIN)))
local remaining = fdiv(MAX - nxt, UNIT)
local reset = cdiv(nxt - (CAP - remaining - 1) * UNIT, DRAIN)
return {1, remaining, reset, 0}
`)

// windowScript is limiter's window (a sliding log with a block) in
// microseconds. KEYS[1] is the log, a list of the passed requests' times,
// oldest first; KEYS[2] holds the time the client's block ends. Each passed
// request counts for PER; the request that would exceed LIMIT is refused,
// clears the log and starts a block of BLOCK, during which every request is
// refused. Both keys live only as long as they matter (the log until its
// newest time leaves the window, the block until it ends). A value foreign
// to this script is deleted.
//
// ARGV: now, limit, per µs, block µs.
var windowScript = redis.NewScript(prelude + `
local LOG, BLK = KEYS[1], KEYS[2]
local LIMIT, PER, BLOCK = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local ok, b = pcall(redis.call, 'GET', BLK)
if not ok then redis.call('DEL', BLK); b = nil end
if b then
  local untl = tonumber(b)
  if untl and NOW < untl then return {0, 0, untl - NOW, untl - NOW} end
  redis.call('DEL', BLK)
end
local ok2, n = pcall(redis.call, 'LLEN', LOG)
if not ok2 then redis.call('DEL', LOG); n = 0 end
-- A request at time t counts during [t, t+PER).
while n > 0 do
  local h = tonumber(redis.call('LINDEX', LOG, 0))
  if h and h > NOW - PER then break end
  redis.call('LPOP', LOG)
  n = n - 1
end
if n >= LIMIT then
  redis.call('DEL', LOG)
  redis.call('SET', BLK, fmt(NOW + BLOCK), 'PX', ttl(NOW + BLOCK))
  return {0, 0, BLOCK, BLOCK}
end
local t = NOW
if n > 0 then
  -- Redis's clock may step back: keep the log sorted.
  t = math.max(t, tonumber(redis.call('LINDEX', LOG, -1)) or t)
end
redis.call('RPUSH', LOG, fmt(t))
n = n + 1
local oldest = tonumber(redis.call('LINDEX', LOG, 0))
redis.call('PEXPIRE', LOG, ttl(t + PER))
return {1, LIMIT - n, oldest + PER - NOW, 0}
`)
