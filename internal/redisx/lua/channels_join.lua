local alive
if ARGV[6] == 'g' then alive = redis.call('HGET', KEYS[5], ARGV[5]) else alive = redis.call('ZSCORE', KEYS[5], ARGV[5]) end
if not alive or tonumber(alive) < 0 then return -1 end
local prev = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('SADD', KEYS[4], ARGV[4])
if prev == ARGV[2] then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if redis.call('HINCRBY', KEYS[3], ARGV[2], 1) == 1 then return 1 end
return 0
