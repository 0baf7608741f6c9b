-- Leases outbox KEYS[1] (lease), KEYS[2] (in flight), KEYS[3] (queue), KEYS[4] (when the
-- in-flight batch was formed, kept for as long as the batch exists), KEYS[5] (state) to
-- owner ARGV[1] for ARGV[3] ms and answers its in-flight batch, made of up to ARGV[2]
-- queued events when there is none, as {since ms (ARGV[4] for a new batch), events...};
-- {} when there is nothing (the lease is released), false while another owner holds it.
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return false end
if redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[4])
  local n = 0
  for i = 1, tonumber(ARGV[2]) do
    local v = redis.call('LPOP', KEYS[3])
    if not v then break end
    redis.call('RPUSH', KEYS[2], v)
    n = n + 1
  end
  if n > 0 and redis.call('EXISTS', KEYS[5]) == 1 then
    redis.call('HSET', KEYS[5], 'fs', (tonumber(redis.call('HGET', KEYS[5], 'h')) or 0) + 1)
    redis.call('HINCRBY', KEYS[5], 'h', n)
    redis.call('PEXPIRE', KEYS[5], 86400000)
  end
end
local batch = redis.call('LRANGE', KEYS[2], 0, -1)
if #batch == 0 then
  if cur then redis.call('DEL', KEYS[1]) end
  return {}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('SET', KEYS[4], ARGV[4], 'NX')
table.insert(batch, 1, redis.call('GET', KEYS[4]))
return batch
