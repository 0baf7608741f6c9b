for _, f in ipairs(redis.call('SPOP', KEYS[2], tonumber(ARGV[3]))) do
  if redis.call('HINCRBY', KEYS[3], f, -1) <= 0 then
    redis.call('HDEL', KEYS[3], f)
    redis.call('ZADD', KEYS[4], ARGV[2], 'v\0' .. f)
  end
end
if redis.call('SCARD', KEYS[2]) == 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  return 1
end
return 0
