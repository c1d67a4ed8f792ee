-- resolve.lua resolves an unknown record. ARGV = offset, claim id,
-- answer ("" releases), op. Only an unknown record of the claim id is
-- resolved, once (the first resolution wins).
--
-- Replies:
--   {OK (8)}
--   {NOT_FOUND (5)}
--   {LOST (6)}
-- Every script may also reply {CORRUPT (7), reason} when the record cannot
-- be read. The codes are defined in prelude.lua.
local ci, ans, op = ARGV[2], ARGV[3], ARGV[4]
local r, why = load()
if r == false then return {CORRUPT, why} end
if not r then return {NOT_FOUND} end
if r.op == op and (r.st == 2 or r.st == 3) then return {OK} end
if r.ci ~= ci or mark(r) ~= 'igu1' then return {LOST} end
if ans == '' then
  r.st, r.le, r.op, r.ci = 3, 0, op, ''
else
  r.st, r.ans, r.le, r.op = 2, ans, 0, op
end
save(r)
return {OK}
