-- Starts a new epoch for a recovery channel whose current epoch gave a serial to a second
-- event (a node saw a serial it had delivered come back with another event: Redis lost
-- appends it had answered and a publisher that could not know handed the serials out
-- again). Only when the epoch is still ARGV[1]: a rotation by another node stands.
-- KEYS: 1 serial, 2 epoch, 3 history list, 4 last sequence per publishing node.
-- ARGV: 1 the epoch that gave a serial twice, 2 the new epoch, 3 history_ttl (s).
-- Returns the channel's epoch after it.
local epoch = redis.call('GET', KEYS[2])
if epoch ~= ARGV[1] then
  return epoch or ''
end
redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
redis.call('SET', KEYS[2], ARGV[2], 'EX', tonumber(ARGV[3]))
return ARGV[2]
