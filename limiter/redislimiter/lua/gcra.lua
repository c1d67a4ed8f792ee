-- gcra.lua is limiter's gcra (nginx's limit_req arithmetic) in
-- microseconds: KEYS[1] holds "level last unit drain" (units, µs, and the
-- parameters the level was counted in). A request adds unit to the level,
-- the level drains by drain units per µs, and a request passes when the
-- level it would reach is at most max. A refused request changes nothing.
-- The key lives until the level is 0 again, so an expired key equals a
-- fresh one; a value counted in other units (the limit changed) or foreign
-- to this script counts as fresh.
--
-- ARGV: now, unit, drain, max (capacity × unit), capacity.
--
-- Replies:
--   {OK (1), remaining, reset µs, 0}
--   {REFUSED (0), 0, retry after µs, retry after µs}
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
  return {REFUSED, 0, wait, wait}
end
if not found or NOW > last then last = NOW end
redis.call('SET', K, fmt(nxt) .. ' ' .. fmt(last) .. ' ' .. fmt(UNIT) .. ' ' .. fmt(DRAIN),
  'PX', ttl(last + cdiv(nxt, DRAIN)))
local remaining = fdiv(MAX - nxt, UNIT)
local reset = cdiv(nxt - (CAP - remaining - 1) * UNIT, DRAIN)
return {OK, remaining, reset, 0}
