-- prelude.lua is the start of every script (scripts.go puts it before
-- each one): the reply codes, the reply of every script. The Go constants
-- in scripts.go (codeOK, codeNotHeld) have the same values;
-- TestLuaReplyCodes checks them.
local OK = 1 -- done: the lock is held (acquire, refresh) or was released; the value written or deleted
local NOT_HELD = 0 -- the caller's token does not hold the lock
