local floor = tonumber(redis.call('GET', KEYS[2]) or '0')
if floor >= tonumber(ARGV[2]) then return -floor end
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v or tonumber(v) < tonumber(ARGV[2]) then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 1
