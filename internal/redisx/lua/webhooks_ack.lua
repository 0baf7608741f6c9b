-- Forgets the in-flight batch KEYS[2] (and its time KEYS[3]) if owner ARGV[1] holds lease
-- KEYS[1]; answers {1, the state KEYS[4]'s generation, h}, or {0} when the lease is not its.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {0} end
redis.call('DEL', KEYS[2], KEYS[3])
local st = redis.call('HMGET', KEYS[4], 'g', 'h')
return {1, st[1] or '', st[2] or '0'}
