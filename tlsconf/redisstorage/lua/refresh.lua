-- refresh.lua extends the lock KEYS[1]'s TTL to ARGV[2] ms if the token
-- ARGV[1] still holds it.
--
-- Replies OK (1) when it does, NOT_HELD (0) when not.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return OK
end
return NOT_HELD
