-- prelude.lua is the start of every script (scripts.go puts it before
-- each one): the reply codes, the clock, and reading and writing records.

-- The reply codes: the first element of every script's reply. The Go
-- constants in scripts.go (codeClaim ...) have the same values;
-- TestLuaReplyCodes checks them.
local CLAIM = 1 -- a claim was made (or found: the same op)
local REPLAY = 2 -- the key has an answer
local IN_FLIGHT = 3 -- another claim holds the key
local MISMATCH = 4 -- the key was used with another request
local NOT_FOUND = 5 -- no record
local LOST = 6 -- the caller's claim no longer holds the key
local CORRUPT = 7 -- the record cannot be read; the reason follows
local OK = 8 -- done
local REVOKED = 9 -- the claim's id has a tombstone: nothing was claimed
local UNKNOWN = 10 -- the record's outcome is unknown
local NEED_ANSWER = 11 -- complete_claim_moved cannot store the answer it was given; nothing changed

-- A record is stored in one of two layouts (RecordFormat, scripts.go);
-- every script reads both and writes the store's.
--
--   - compact (the default): a string, one GET and one SET per script. A
--     fixed header packed with Lua's struct library (compactHeader: magic
--     "igr2", state, fingerprint version, takeover flag, token, claimed,
--     lease end and expiry as doubles, the 32-byte fingerprint, then the
--     route, op and claim id each after its 16-bit length, then the number
--     of claim tombstones), the tombstones (16-byte claim id, end ms), and
--     the answer, to the end of the value.
--   - hash: the first release's layout, a hash with one field per value
--     ("v" = "1", "st", "fp", "rt", "tk", "cl", "le", "ex", "op", "tko",
--     "ci", "fv", "ans") and one field "x" .. claim id per tombstone,
--     numbers in decimal. Replicas of the first release read only this
--     one (see TestFirstReleaseReadsNewRecords).
--
-- An in-flight record's answer, which it otherwise lacks, may hold a mark
-- of DESIGN.md's Unknown outcomes: "igs1" and the sent mark's info (the
-- claim's request was forwarded), or "igu1", the cause's byte and that info
-- (the record is unknown). An unknown record is in flight with its lease
-- ending at its expiry, so that replicas of revision 2, which ignore an
-- in-flight record's answer, answer 409 in progress and never take it over.
--
-- The key expires when the record and its last live tombstone have.
--
-- Numbers: Lua 5.1 numbers are doubles, exact for integers below 2^53.
-- Milliseconds (~1.8e12) and microsecond tokens (~1.8e15) fit with room to
-- spare until the year 2255. In the hash layout they are written with
-- %.0f, never tostring (which switches to exponent notation).
--
-- The call's record key (K), arguments (A), clock offset and clock are set
-- by begin at the start of every call: scripts.go puts `begin(KEYS, ARGV)`
-- between the prelude and a script's own code, and each function of the
-- library (Redis Functions) starts with it. Everything else here is made
-- once per EVAL, or once per FUNCTION LOAD.
local K, A, NOW, NOWUS
local function begin(keys, argv)
  if redis.replicate_commands then pcall(redis.replicate_commands) end
  K, A = keys[1], argv
  local off = tonumber(argv[1])
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + off
  NOWUS = tonumber(t[1]) * 1000000 + tonumber(t[2]) + off * 1000
end
local COMPACT = {{compact}}
local HEAD = '>c4BBBddddc32Hc0Hc0Hc0H'

local function num(s)
  if type(s) ~= 'string' or not string.match(s, '^%d+$') then return nil end
  return tonumber(s)
end
local function fmt(n) return string.format('%.0f', n) end
-- notify publishes a completion notice when the call brought one: the
-- channel in ARGV[i], the record's key in hex in ARGV[i+1]
-- (keystore.FoldedNotice). It comes after the call's write, which stands
-- whatever the publication does: a PUBLISH Redis refuses (the channel not
-- granted to the ACL user) must not fail the call that stored an answer,
-- so it is a pcall, and the waiters fall back to their poll.
local function notify(i)
  if A[i] then redis.pcall('PUBLISH', A[i], A[i + 1]) end
end

-- A record r: st (1 in flight, 2 completed, 3 released), fp, rt, tk (the
-- token), cl, le, ex (ms), op, tko, ci, fv,
-- ans (a completed record's answer) and xs (claim id -> tombstone end ms).

-- decode parses a compact record; false and the reason if it is not one.
local function decode(v)
  if string.sub(v, 1, 4) ~= 'igr2' then return false, 'unknown record format' end
  local ok, _, st, fv, tko, tk, cl, le, ex, fp, rt, op, ci, nx, pos = pcall(struct.unpack, HEAD, v)
  if not ok then return false, 'malformed record' end
  local r = {st = st, fv = fv, tko = tko, tk = tk, cl = cl, le = le, ex = ex,
    fp = fp, rt = rt, op = op, ci = ci, xs = {}}
  for _ = 1, nx do
    local id, e
    ok, id, e, pos = pcall(struct.unpack, '>c16d', v, pos)
    if not ok then return false, 'malformed record' end
    r.xs[id] = e
  end
  if pos <= #v then r.ans = string.sub(v, pos) end
  return r
end

-- loadHash reads a record in the hash layout.
local function loadHash()
  local ty = redis.call('TYPE', K)['ok']
  if ty ~= 'hash' then return false, 'value is a ' .. ty .. ', not a record' end
  local all = redis.call('HGETALL', K)
  local f, xs = {}, {}
  for i = 1, #all, 2 do
    local name = all[i]
    if string.sub(name, 1, 1) == 'x' and #name == 17 then
      local e = num(all[i + 1])
      if e then xs[string.sub(name, 2)] = e end
    else
      f[name] = all[i + 1]
    end
  end
  if f.v ~= '1' then return false, 'unknown record format' end
  local r = {st = num(f.st), fp = f.fp, rt = f.rt, tk = num(f.tk), cl = num(f.cl),
    le = num(f.le), ex = num(f.ex), op = f.op or '', tko = num(f.tko) or 0, ci = f.ci or '',
    fv = f.fv and num(f.fv) or 1, ans = f.ans, xs = xs}
  if type(r.fp) ~= 'string' or #r.fp ~= 32 or type(r.rt) ~= 'string' or not r.tk or
      not r.cl or not r.le or not r.ex or not r.fv or r.fv > 255 or r.tko > 1 then
    return false, 'malformed record'
  end
  return r
end

-- load returns the record; or nil (absent or expired) and, when expired, the
-- stale record (for its token and tombstones); or false and the reason it
-- is corrupt.
local function load()
  local v = redis.pcall('GET', K)
  local r, why
  if v == false then return nil end
  if type(v) == 'string' then r, why = decode(v) else r, why = loadHash() end
  if not r then return false, why end
  if r.st ~= 1 and r.st ~= 2 and r.st ~= 3 then return false, 'malformed record' end
  -- Plausible times (NaN fails every comparison): a record expires after
  -- it was claimed, and before the year 5000.
  if not (r.tk >= 0 and r.cl >= 0 and r.le >= 0 and r.ex > r.cl and r.ex < 1e14) then
    return false, 'malformed record'
  end
  if r.st == 2 and (not r.ans or r.ans == '') then return false, 'completed record without an answer' end
  if NOW >= r.ex then return nil, r end
  return r
end

-- mark is an in-flight record's mark: 'igs1' (sent), 'igu1' (unknown) or
-- nil.
local function mark(r)
  if r.st ~= 1 or not r.ans then return nil end
  local m = string.sub(r.ans, 1, 4)
  if m == 'igs1' or m == 'igu1' then return m end
  return nil
end

-- info is the sent mark's info of a record with a mark, else ''.
local function info(r)
  local m = mark(r)
  if m == 'igs1' then return string.sub(r.ans, 5) end
  if m == 'igu1' then return string.sub(r.ans, 6) end
  return ''
end

-- unknown makes the in-flight record r unknown with cause (a number).
local function unknown(r, cause)
  r.ans = 'igu1' .. string.char(cause) .. info(r)
  r.le = r.ex
end

-- revoked tells whether claim id has a live tombstone in r (a record or a
-- stale one, or nil).
local function revoked(r, id)
  if id == '' or not r then return false end
  local e = r.xs[id]
  return e ~= nil and NOW < e
end

-- live returns r's live tombstones' claim ids and the key's TTL in ms (a
-- string): the key expires at r.ex or when the last tombstone ends,
-- whichever is later.
local function live(r)
  local last, ids = r.ex, {}
  for id, e in next, r.xs do
    if NOW < e then
      ids[#ids + 1] = id
      if e > last then last = e end
    end
  end
  return ids, fmt(math.max(1, last - NOW))
end

-- head is r's compact value without its answer: the header and the
-- tombstones of ids (from live). With no tombstones its length depends only
-- on #r.rt, #r.op and #r.ci (headLen in scripts.go computes the same).
local function head(r, ids)
  local v = struct.pack(HEAD, 'igr2', r.st, r.fv, r.tko, r.tk, r.cl, r.le, r.ex, r.fp,
    #r.rt, r.rt, #r.op, r.op, #r.ci, r.ci, #ids)
  if #ids > 0 then
    local parts = {v}
    for _, id in ipairs(ids) do parts[#parts + 1] = struct.pack('>c16d', id, r.xs[id]) end
    v = table.concat(parts)
  end
  return v
end

-- save writes r in the store's layout, with its live tombstones, and
-- expires the key as live says.
local function save(r)
  local ids, ttl = live(r)
  if r.st == 3 then r.ans = nil end
  if COMPACT then
    redis.call('SET', K, head(r, ids) .. (r.ans or ''), 'PX', ttl)
    return
  end
  local f = {'v', '1', 'st', fmt(r.st), 'fp', r.fp, 'rt', r.rt, 'tk', fmt(r.tk), 'cl', fmt(r.cl),
    'le', fmt(r.le), 'ex', fmt(r.ex), 'op', r.op, 'tko', fmt(r.tko), 'ci', r.ci, 'fv', fmt(r.fv)}
  if r.ans then
    f[#f + 1] = 'ans'
    f[#f + 1] = r.ans
  end
  for _, id in ipairs(ids) do
    f[#f + 1] = 'x' .. id
    f[#f + 1] = fmt(r.xs[id])
  end
  redis.call('DEL', K)
  redis.call('HSET', K, unpack(f))
  redis.call('PEXPIRE', K, ttl)
end
