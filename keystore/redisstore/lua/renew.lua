-- renew.lua extends a lease. ARGV = offset, token, lease ms. The lease
-- never ends after the record expires, and never moves back.
--
-- Replies:
--   {OK (8), lease end}
--   {NOT_FOUND (5)}
--   {LOST (6)}
-- Every script may also reply {CORRUPT (7), reason} when the record cannot
-- be read. The codes are defined in prelude.lua.
local tok, lease = num(ARGV[2]), tonumber(ARGV[3])
local r, why = load()
if r == false then return {CORRUPT, why} end
if not r then return {NOT_FOUND} end
if r.st ~= 1 or r.tk ~= tok or mark(r) == 'igu1' then return {LOST} end
local e = math.min(NOW + lease, r.ex)
if e > r.le then
  r.le = e
  save(r)
end
return {OK, r.le}
