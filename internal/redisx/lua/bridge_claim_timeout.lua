local st = redis.call('HMGET', KEYS[1], 'st', 'r')
if not st[1] then return {1, ''} end
if st[1] == '1' then
  if st[2] then redis.call('HDEL', KEYS[1], 'r') else st[2] = '' end
  return {0, st[2]}
end
redis.call('HSET', KEYS[1], 'st', '2')
return {1, ''}
