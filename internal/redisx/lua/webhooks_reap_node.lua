-- Removes up to ARGV[2] channels of a node the node registry reaped: KEYS[1] is its channel
-- set, KEYS[2] the node counts, KEYS[3] the holds. A channel only it had is held as
-- channel_vacated, due ARGV[1] (ms). SPOP hands each channel to one reaper. Answers 1 once
-- the node has none left, 0 when more remain.
for _, f in ipairs(redis.call('SPOP', KEYS[1], tonumber(ARGV[2]))) do
  if redis.call('HINCRBY', KEYS[2], f, -1) <= 0 then
    redis.call('HDEL', KEYS[2], f)
    redis.call('ZADD', KEYS[3], ARGV[1], 'v\0' .. f)
  end
end
if redis.call('SCARD', KEYS[1]) == 0 then return 1 end
return 0
