local st = redis.call('HMGET', KEYS[1], 'st', 'dl')
if not st[1] then return 1 end
if st[1] == '1' then return 2 end
if st[1] == '2' then return 3 end
if tonumber(ARGV[2]) > tonumber(st[2]) then return 4 end
if ARGV[3] == '1' then
  if redis.call('EXISTS', KEYS[2]) == 1 then return 5 end
  redis.call('HSET', KEYS[2], 'c', ARGV[4], 'claimed', '0')
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
end
redis.call('HSET', KEYS[1], 'st', '1', 'r', ARGV[1])
redis.call(ARGV[8], KEYS[3], ARGV[7])
return 0
