-- mark_sent.lua marks an in-flight record as forwarded. ARGV = offset,
-- token, info.
--
-- Replies:
--   {OK (8)}
--   {NOT_FOUND (5)}
--   {LOST (6)}
-- Every script may also reply {CORRUPT (7), reason} when the record cannot
-- be read. The codes are defined in prelude.lua.
local tok, inf = num(ARGV[2]), ARGV[3]
local r, why = load()
if r == false then return {CORRUPT, why} end
if not r then return {NOT_FOUND} end
if r.st ~= 1 or r.tk ~= tok or mark(r) == 'igu1' then return {LOST} end
r.ans = 'igs1' .. inf
save(r)
return {OK}
