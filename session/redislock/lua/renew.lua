-- renew.lua extends the caller's lease. KEYS = lock; ARGV = owner token,
-- lease ms.
--
-- Replies HELD (1) when the lease was extended, NOT_HELD (0) when the
-- caller no longer holds the lock.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return HELD
end
return NOT_HELD
