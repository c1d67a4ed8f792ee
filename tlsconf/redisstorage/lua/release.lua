-- release.lua deletes the lock KEYS[1] if the token ARGV[1] still holds
-- it.
--
-- Replies OK (1) when it released the lock, NOT_HELD (0) when the token
-- did not hold it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return OK
end
return NOT_HELD
