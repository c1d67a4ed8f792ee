-- acquire.lua takes the lock KEYS[1] for the token ARGV[1] with a TTL of
-- ARGV[2] ms, or keeps it when the token already holds it (a retried
-- attempt whose first reply was lost).
--
-- Replies OK (1) when the token holds the lock, NOT_HELD (0) when another
-- does.
local v = redis.call('GET', KEYS[1])
if v == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return OK
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return OK
end
return NOT_HELD
