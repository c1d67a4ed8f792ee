package redislock

import "github.com/redis/go-redis/v9"

// The scripts run with EVALSHA (falling back to EVAL). Every key a script
// touches shares the session's hash tag, so each runs on one Cluster slot.
// PUBLISH takes a channel, not a key, and is allowed in scripts.

// acquireScript: KEYS = lock, next, fence; ARGV = owner token, lease ms,
// next TTL ms. Replies {1, fence} when the caller holds the lock (also when
// it already did: a resent script is harmless), else {0, ms until the
// holder's lease ends (or the next claim's, when the lock is free but
// another waiter's turn is next)}.
//
// The fence is max(last + 1, TIME in µs); µs values (~1.8e15) are exact in
// Lua's doubles and written with %.0f, never tostring.
var acquireScript = redis.NewScript(`
if redis.replicate_commands then pcall(redis.replicate_commands) end
local lock, nxt, fk = KEYS[1], KEYS[2], KEYS[3]
local tok, lease, nttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local cur = redis.call('GET', lock)
if cur == tok then
  return {1, redis.call('GET', fk) or '1'}
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
  return {1, fs}
end
if not n or n == tok then
  redis.call('SET', nxt, tok, 'PX', nttl)
end
local left = redis.call('PTTL', lock)
if left < 0 then left = redis.call('PTTL', nxt) end
if left < 0 then left = 0 end
return {0, left}
`)

// renewScript: KEYS = lock; ARGV = owner token, lease ms. Replies 1 when
// the lease was extended, 0 when the caller no longer holds the lock.
var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// releaseScript: KEYS = lock; ARGV = owner token, channel, session hex key.
// Deletes the lock if the caller holds it and publishes the release.
// Replies 1 when it released, 0 when the lock was not the caller's.
var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  return 1
end
return 0
`)

// cleanupScript: KEYS = lock, next; ARGV = owner token, channel, session
// hex key. Undoes what a failed or abandoned acquire may have left: the
// lock (released, as by releaseScript) and the caller's claim on the next
// turn.
var cleanupScript = redis.NewScript(`
local r = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  r = 1
end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  redis.call('PUBLISH', ARGV[2], ARGV[3])
  r = 1
end
return r
`)
