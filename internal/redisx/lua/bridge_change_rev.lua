local c = redis.call('HMGET', KEYS[1], 'client', 'rev')
if c[1] ~= ARGV[1] then return 0 end
if tonumber(ARGV[2]) > tonumber(c[2]) then redis.call('HSET', KEYS[1], 'rev', ARGV[2]) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
