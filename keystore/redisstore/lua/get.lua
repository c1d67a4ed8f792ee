-- get.lua reads a record. ARGV = offset, and "1" to leave the answer and
-- the sent mark's info out (listings), "2" to leave only the answer out
-- (the listing of unknown records). Read-only.
--
-- Replies:
--   {OK (8), state, fingerprint, route, token, claimed, lease end, expires,
--     answer, claim id, fingerprint version, mark, info}: the mark is 0,
--     1 (sent) or 10 + the cause (unknown)
--   {NOT_FOUND (5)}
-- Every script may also reply {CORRUPT (7), reason} when the record cannot
-- be read. The codes are defined in prelude.lua.
local r, why = load()
if r == false then return {CORRUPT, why} end
if not r then return {NOT_FOUND} end
local a, i, mk = '', '', 0
if r.st == 2 and ARGV[2] ~= '1' and ARGV[2] ~= '2' then a = r.ans end
local m = mark(r)
if m == 'igs1' then mk = 1 end
if m == 'igu1' then mk = 10 + string.byte(r.ans, 5) end
if m and ARGV[2] ~= '1' then i = info(r) end
return {OK, r.st, r.fp, r.rt, r.tk, r.cl, r.le, r.ex, a, r.ci, r.fv, mk, i}
