local c = redis.call('HGET', KEYS[1], 'claimed')
if c ~= '0' then return 0 end
redis.call('HSET', KEYS[1], 'claimed', '1')
return 1
