if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then
  redis.call('SREM', KEYS[4], ARGV[3])
  return -1
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[4], ARGV[3])
if redis.call('HINCRBY', KEYS[3], ARGV[2], -1) <= 0 then
  redis.call('HDEL', KEYS[3], ARGV[2])
  redis.call('HDEL', KEYS[1], ARGV[2])
  return 1
end
return 0
