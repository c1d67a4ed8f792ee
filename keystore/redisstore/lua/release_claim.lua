-- release_claim.lua releases a claim by its id. ARGV = offset, claim id,
-- lease ms. A record in flight under the id is released (a tombstone, as
-- release.lua leaves); in every case the id gets a tombstone that ends a
-- lease from now, and the key lives at least that long. A tombstone-only
-- record is a released record with a zero fingerprint and token.
--
-- Replies:
--   {OK (8), 1}: a claim was released
--   {OK (8), 0}: none was
-- Every script may also reply {CORRUPT (7), reason} when the record cannot
-- be read. The codes are defined in prelude.lua.
local ci, lease = ARGV[2], tonumber(ARGV[3])
local r, stale = load()
if r == false then return {CORRUPT, stale} end
local released = 0
local rec = r or stale
if r and r.st == 1 and r.ci == ci then
  r.st, r.le, r.ci = 3, 0, ''
  released = 1
elseif not rec then
  rec = {st = 3, fp = string.rep('\0', 32), rt = '', tk = 0, cl = NOW, le = 0, ex = NOW + lease,
    op = '', tko = 0, ci = '', fv = 1, xs = {}}
end
local old = rec.xs[ci]
if not old or old < NOW + lease then rec.xs[ci] = NOW + lease end
save(rec)
return {OK, released}
