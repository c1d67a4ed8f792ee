-- reserve.lua claims a key. ARGV = offset, fingerprint (32 bytes), route,
-- lease ms, retention ms, op (a nonce for this call), claim id (16 bytes),
-- fingerprint version (decimal), hold ("1": a lapsed claim with the sent
-- mark is marked unknown, cause lapsed, instead of taken over).
--
-- Replies:
--   {CLAIM (1), token, lease end, takeover 0|1, claimed, expires}
--   {REPLAY (2), answer, fingerprint version, ms the record still lives}
--   {IN_FLIGHT (3)}
--   {MISMATCH (4), fingerprint version}
--   {REVOKED (9)}: the claim id has a tombstone, nothing was claimed
--   {UNKNOWN (10), marked 0|1, info}: the record's outcome is unknown
--     (marked 1: this call marked it)
-- Every script may also reply {CORRUPT (7), reason} when the record cannot
-- be read. The codes are defined in prelude.lua.
--
-- A claim's token is max(previous token + 1, Redis time in microseconds):
-- it grows within a record's life (the released tombstone keeps the
-- previous token), and it still never repeats for a key after the record
-- expired or was lost in a failover, unless Redis's clock went back by more
-- than that.
--
-- op makes the script safe to run twice (go-redis may resend a command
-- after a network error): a claim that finds its own op returns itself. A
-- claim whose id was released (release_claim.lua) before it arrived
-- changes nothing.
local fp, rt, lease, ret, op, ci, fv = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], ARGV[7], tonumber(ARGV[8])
local hold = ARGV[9] == '1'
local r, stale = load()
if r == false then return {CORRUPT, stale} end
if revoked(r or stale, ci) then return {REVOKED} end
if r and r.st ~= 3 then
  if r.st == 1 and r.op == op then return {CLAIM, r.tk, r.le, r.tko, r.cl, r.ex} end
  if r.fv ~= fv or r.fp ~= fp then return {MISMATCH, r.fv} end
  if r.st == 2 then return {REPLAY, r.ans, r.fv, r.ex - NOW} end
  local m = mark(r)
  if m == 'igu1' then return {UNKNOWN, 0, ''} end
  if NOW < r.le then return {IN_FLIGHT} end
  if m == 'igs1' and hold then
    unknown(r, {{lapsed}})
    save(r)
    return {UNKNOWN, 1, info(r)}
  end
  r.ans = nil
  r.tk = math.max(r.tk + 1, NOWUS)
  r.cl, r.le, r.ex = NOW, NOW + lease, math.max(r.ex, NOW + ret)
  r.rt, r.op, r.tko, r.ci = rt, op, 1, ci
  save(r)
  return {CLAIM, r.tk, r.le, 1, NOW, r.ex}
end
local prev = r or stale
local tk = NOWUS
if prev and prev.tk >= tk then tk = prev.tk + 1 end
local n = {st = 1, fp = fp, rt = rt, tk = tk, cl = NOW, le = NOW + lease, ex = NOW + ret,
  op = op, tko = 0, ci = ci, fv = fv, xs = prev and prev.xs or {}}
save(n)
return {CLAIM, tk, n.le, 0, NOW, n.ex}
