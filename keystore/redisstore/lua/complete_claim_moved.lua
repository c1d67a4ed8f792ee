-- complete_claim_moved.lua is complete_claim.lua without the answer in
-- its arguments: the answer waits in KEYS[2], the scratch key (same slot),
-- which the caller SET in the same pipeline, just before, to a placeholder
-- of ARGV[4] bytes followed by the answer. On success the script writes the
-- record's header over the placeholder (SETRANGE) and moves the scratch
-- key to the record's (RENAME, PEXPIRE): the answer is never a Lua string.
-- (This Redis's Lua hashes every byte of every string it makes, twice for
-- complete_claim.lua's answer: in ARGV[4] and in save's concatenation.
-- Moving costs a command more; it saves Redis ~5 µs of CPU with a 4.5 KB
-- answer, ~140 µs with 45 KB: the Go side moves answers of 4 KB or more.)
--
-- ARGV = offset, claim id, token, the placeholder's length, op,
-- fingerprint, fingerprint version, route, claimed ms, expires ms, and
-- optionally a notice's channel and key (notify): complete_claim.lua's,
-- but for ARGV[4].
--
-- Replies: complete_claim.lua's, with the same checks, and
--   {NEED_ANSWER (11)}: the answer cannot be moved: the store writes the
--     hash format, or the record keeps live tombstones (a header longer
--     than the placeholder), or its route's length is not the one the
--     placeholder was made for, or the scratch key is gone. Nothing was
--     changed or published: run complete_claim.lua with the answer.
-- Every reply but a success deletes the scratch key, so none is left
-- behind.
local S = KEYS[2]
local ci, tok, plen, op = ARGV[2], num(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local fp, fv, rt, cl, ex = ARGV[6], tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10])

-- move stores r (its answer being S's) as save would, if it can: the
-- compact format, no live tombstones, a header as long as the placeholder
-- and a scratch key longer than it (the answer is never empty).
local function move(r)
  if not COMPACT then return false end
  local ids, ttl = live(r)
  if #ids > 0 then return false end
  local h = head(r, ids)
  if #h ~= plen or redis.call('STRLEN', S) <= plen then return false end
  redis.call('SETRANGE', S, 0, h)
  redis.call('RENAME', S, K)
  redis.call('PEXPIRE', K, ttl)
  return true
end

local function refuse(reply)
  redis.call('DEL', S)
  return reply
end

if not tok then return refuse({LOST}) end
local r, stale = load()
if r == false then return refuse({CORRUPT, stale}) end
if not r then
  if revoked(stale, ci) then return refuse({LOST}) end
  if NOW >= ex then
    redis.call('DEL', S)
    notify(11)
    return {OK, 3}
  end
  if not move({st = 2, fp = fp, rt = rt, tk = tok, cl = cl, le = 0, ex = ex, op = op, tko = 0,
      ci = ci, fv = fv, xs = stale and stale.xs or {}}) then
    return refuse({NEED_ANSWER})
  end
  notify(11)
  return {OK, 2}
end
if r.ci ~= ci or r.tk ~= tok then return refuse({LOST}) end
if r.st == 2 then
  redis.call('DEL', S)
  notify(11)
  return {OK, 1}
end
if r.st ~= 1 then return refuse({LOST}) end
r.st, r.le, r.op = 2, 0, op
if not move(r) then return refuse({NEED_ANSWER}) end
notify(11)
return {OK, 1}
