if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'b', ARGV[1], 'dl', ARGV[2], 'st', '0')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
