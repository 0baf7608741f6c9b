local prev = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
for i = 4, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
local rejoined = 0
if not prev or tonumber(prev) < tonumber(ARGV[3]) then rejoined = 1 end
local e = redis.call('HGET', KEYS[3], ARGV[1])
local above = tonumber(ARGV[5])
if rejoined == 1 or above > 0 or not e then
  e = redis.call('INCR', KEYS[2])
  if e <= above then
    e = above + 1
    redis.call('SET', KEYS[2], e)
  end
  redis.call('HSET', KEYS[3], ARGV[1], e)
end
return {rejoined, tonumber(e)}
