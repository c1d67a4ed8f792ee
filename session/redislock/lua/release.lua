-- release.lua deletes the lock if the caller holds it and publishes the
-- release. KEYS = lock; ARGV = owner token, channel, session hex key. The
-- publication is a pcall: a PUBLISH Redis refuses (the channel not granted
-- to the ACL user) must not fail a release that was made (the waiters
-- poll), nor, in cleanup.lua, stop before the next turn's claim is gone.
--
-- Replies HELD (1) when it released, NOT_HELD (0) when the lock was not
-- the caller's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.pcall('PUBLISH', ARGV[2], ARGV[3])
  return HELD
end
return NOT_HELD
