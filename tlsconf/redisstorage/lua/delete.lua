-- delete.lua deletes the value keys KEYS[2..] and unindexes the members
-- ARGV from the sorted set KEYS[1].
--
-- Replies OK (1).
for i = 2, #KEYS do redis.call('DEL', KEYS[i]) end
for i = 1, #ARGV do redis.call('ZREM', KEYS[1], ARGV[i]) end
return OK
