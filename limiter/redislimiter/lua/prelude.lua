-- prelude.lua is the start of every script (scripts.go puts it before
-- each one): the reply codes, the clock and exact integer division.

-- The reply codes: the first element of every script's reply
-- {code, remaining, reset µs, retry after µs}. The Go constants in
-- scripts.go (codeOK, codeRefused) have the same values;
-- TestLuaReplyCodes checks them.
local OK = 1 -- the request passes
local REFUSED = 0 -- the request is refused

-- Redis 3.2 to 4: replicate the script's effects, not the script, since it
-- reads TIME (the default from Redis 5 on).
if redis.replicate_commands then pcall(redis.replicate_commands) end
local NOW
local TTLPAD = 0
if ARGV[1] ~= '' then
  NOW = tonumber(ARGV[1])
  TTLPAD = 3600000
else
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function fdiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end
local function cdiv(a, b)
  local q = fdiv(a, b)
  if q * b < a then q = q + 1 end
  return q
end
local function fmt(n) return string.format('%.0f', n) end
-- ttl returns the lifetime in ms of state that equals a fresh one at µs.
local function ttl(at) return math.max(cdiv(at - NOW, 1000), 1) + TTLPAD end
