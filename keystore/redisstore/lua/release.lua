-- release.lua releases a key under a token. ARGV = offset, token, op,
-- force, and optionally a notice's channel and key (notify, published with
-- OK). The record stays as a released tombstone (answer cleared, token
-- kept) until it expires.
--
-- Replies:
--   {OK (8)}
--   {NOT_FOUND (5)}
--   {LOST (6)}
-- Every script may also reply {CORRUPT (7), reason} when the record cannot
-- be read. The codes are defined in prelude.lua.
local tok, op, force = num(ARGV[2]), ARGV[3], ARGV[4] == '1'
local r, why = load()
if r == false then return {CORRUPT, why} end
if not r then return {NOT_FOUND} end
if r.st == 3 and r.op == op and (force or r.tk == tok) then notify(5) return {OK} end
if r.st ~= 1 or (not force and r.tk ~= tok) or (force and mark(r) == 'igu1') then return {LOST} end
r.st, r.le, r.op, r.ci = 3, 0, op, ''
save(r)
notify(5)
return {OK}
