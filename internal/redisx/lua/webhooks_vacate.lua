-- This node's last local subscriber of channel ARGV[1] left: KEYS[1] the node's channel
-- set, KEYS[2] the node counts, KEYS[3] the holds. When no node has the channel any more,
-- holds channel_vacated ARGV[2] until ARGV[3] (ms).
if redis.call('SREM', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('HINCRBY', KEYS[2], ARGV[1], -1) > 0 then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[2])
return 1
