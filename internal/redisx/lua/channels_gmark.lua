local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if s and tonumber(s) > tonumber(ARGV[2]) then return {0, 0} end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return {1, tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')}
