-- complete_claim.lua stores a claim's answer. ARGV = offset, claim id,
-- token, answer, op, fingerprint, fingerprint version, route, claimed ms,
-- expires ms, and optionally a notice's channel and key (notify).
-- For an answer of 4 KB or more the compact format runs
-- complete_claim_moved.lua instead, which finds the answer in a key of its
-- own and never makes it a Lua string; this one serves the hash format,
-- smaller answers, and that one's NEED_ANSWER.
--
-- Replies:
--   {OK (8), 1}: completed (or already completed by this claim)
--   {OK (8), 2}: recreated (the record had vanished)
--   {OK (8), 3}: expired (vanished, past expires: nothing stored)
--   {LOST (6)}: another claim holds the key
-- Every script may also reply {CORRUPT (7), reason} when the record cannot
-- be read. The codes are defined in prelude.lua.
--
-- Every {OK, ...} publishes the notice.
local ci, tok, ans, op = ARGV[2], num(ARGV[3]), ARGV[4], ARGV[5]
local fp, fv, rt, cl, ex = ARGV[6], tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10])
if not tok then return {LOST} end
local r, stale = load()
if r == false then return {CORRUPT, stale} end
if not r then
  if revoked(stale, ci) then return {LOST} end
  if NOW >= ex then notify(11) return {OK, 3} end
  save({st = 2, fp = fp, rt = rt, tk = tok, cl = cl, le = 0, ex = ex, op = op, tko = 0,
    ci = ci, fv = fv, ans = ans, xs = stale and stale.xs or {}})
  notify(11)
  return {OK, 2}
end
if r.ci ~= ci or r.tk ~= tok then return {LOST} end
if r.st == 2 then notify(11) return {OK, 1} end
if r.st ~= 1 then return {LOST} end
r.st, r.ans, r.le, r.op = 2, ans, 0, op
save(r)
notify(11)
return {OK, 1}
