local c = redis.call('HMGET', KEYS[1], 'client', 'rev')
if c[1] == ARGV[1] and tonumber(c[2]) > tonumber(ARGV[2]) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'client', ARGV[1], 'rev', ARGV[2], 'json', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
