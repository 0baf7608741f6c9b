local v = redis.call('HGET', KEYS[1], ARGV[1])
if v and tonumber(v) > tonumber(ARGV[2]) then return 0 end
for i = 2, #KEYS do redis.call('DEL', KEYS[i]) end
return 1
