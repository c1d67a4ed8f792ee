-- complete.lua stores an answer under a token. ARGV = offset, token (""
-- with force), answer, op, force ("1" ignores the token:
-- Admin.ForceComplete).
--
-- Replies:
--   {OK (8)}
--   {NOT_FOUND (5)}
--   {LOST (6)}: another token holds the key, or it is not in flight
-- Every script may also reply {CORRUPT (7), reason} when the record cannot
-- be read. The codes are defined in prelude.lua.
local tok, ans, op, force = num(ARGV[2]), ARGV[3], ARGV[4], ARGV[5] == '1'
local r, why = load()
if r == false then return {CORRUPT, why} end
if not r then return {NOT_FOUND} end
if r.st == 2 and r.op == op and (force or r.tk == tok) then return {OK} end
if r.st ~= 1 or (not force and r.tk ~= tok) or (force and mark(r) == 'igu1') then return {LOST} end
r.st, r.ans, r.le, r.op = 2, ans, 0, op
if force then r.ci = '' end
save(r)
return {OK}
