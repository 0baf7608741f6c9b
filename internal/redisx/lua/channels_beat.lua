local prev = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
for i = 2, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[4]) end
if not prev or tonumber(prev) < tonumber(ARGV[3]) then return 1 end
return 0
