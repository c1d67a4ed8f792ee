-- prelude.lua is the start of every script (scripts.go puts it before
-- each one): the reply codes, the first element of every reply. The Go
-- constants in scripts.go (codeHeld, codeNotHeld) have the same values;
-- TestLuaReplyCodes checks them.
local HELD = 1 -- the caller's token holds the lock (release, cleanup: held it, and deleted it)
local NOT_HELD = 0 -- the caller's token does not hold the lock
