-- store.lua writes the value ARGV[2] at the key ARGV[1] (the hash KEYS[2])
-- and indexes the key in the sorted set KEYS[1], in one step; the
-- modification time is Redis's clock (TIME), in microseconds.
--
-- Replies OK (1).
local t = redis.call('TIME')
local us = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
redis.call('HSET', KEYS[2], 'k', ARGV[1], 'v', ARGV[2], 'm', us, 's', #ARGV[2])
redis.call('ZADD', KEYS[1], 0, ARGV[1])
return OK
