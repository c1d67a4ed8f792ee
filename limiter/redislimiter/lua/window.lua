-- window.lua is limiter's window (a sliding log with a block) in
-- microseconds. KEYS[1] is the log, a list of the passed requests' times,
-- oldest first; KEYS[2] holds the time the client's block ends. Each
-- passed request counts for PER; the request that would exceed LIMIT is
-- refused, clears the log and starts a block of BLOCK, during which every
-- request is refused. Both keys live only as long as they matter (the log
-- until its newest time leaves the window, the block until it ends). A
-- value foreign to this script is deleted.
--
-- ARGV: now, limit, per µs, block µs.
--
-- Replies:
--   {OK (1), remaining, reset µs, 0}
--   {REFUSED (0), 0, block left µs, block left µs}
local LOG, BLK = KEYS[1], KEYS[2]
local LIMIT, PER, BLOCK = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local ok, b = pcall(redis.call, 'GET', BLK)
if not ok then redis.call('DEL', BLK); b = nil end
if b then
  local untl = tonumber(b)
  if untl and NOW < untl then return {REFUSED, 0, untl - NOW, untl - NOW} end
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
  return {REFUSED, 0, BLOCK, BLOCK}
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
return {OK, LIMIT - n, oldest + PER - NOW, 0}
