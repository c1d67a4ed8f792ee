-- cleanup.lua undoes what a failed or abandoned acquire may have left: the
-- lock (released, as by release.lua) and the caller's claim on the next
-- turn. KEYS = lock, next; ARGV = owner token, channel, session hex key.
--
-- Replies HELD (1) when it deleted either, else NOT_HELD (0).
local r = NOT_HELD
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.pcall('PUBLISH', ARGV[2], ARGV[3])
  r = HELD
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  redis.pcall('PUBLISH', ARGV[2], ARGV[3])
  r = HELD
end
return r
