-- acquire.lua takes a session's lock. KEYS = lock, next, fence; ARGV =
-- owner token, lease ms, next TTL ms.
--
-- Replies:
--   {HELD (1), fence} when the caller holds the lock (also when it
--     already did: a resent script is harmless)
--   {NOT_HELD (0), ms until the holder's lease ends (or the next claim's,
--     when the lock is free but another waiter's turn is next)}
--
-- The fence is max(last + 1, TIME in µs); µs values (~1.8e15) are exact in
-- Lua's doubles and written with %.0f, never tostring.
if redis.replicate_commands then pcall(redis.replicate_commands) end
local lock, nxt, fk = KEYS[1], KEYS[2], KEYS[3]
local tok, lease, nttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local cur = redis.call('GET', lock)
if cur == tok then
  return {HELD, redis.call('GET', fk) or '1'}
end
local n = redis.call('GET', nxt)
if not cur and (not n or n == tok) then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local f = math.max((tonumber(redis.call('GET', fk) or '0') or 0) + 1, now)
  local fs = string.format('%.0f', f)
  redis.call('SET', fk, fs, 'PX', 2 * lease)
  redis.call('SET', lock, tok, 'PX', lease)
  if n then redis.call('DEL', nxt) end
  return {HELD, fs}
end
if not n or n == tok then
  redis.call('SET', nxt, tok, 'PX', nttl)
end
local left = redis.call('PTTL', lock)
if left < 0 then left = redis.call('PTTL', nxt) end
if left < 0 then left = 0 end
return {NOT_HELD, left}
