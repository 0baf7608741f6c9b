-- This node's first local subscriber of channel ARGV[1] (app NUL channel): KEYS[1] is the
-- node's channel set, KEYS[2] the channels' node counts, KEYS[3] the holds, KEYS[4..] the
-- outboxes (pairs, see webhooks_push). When the channel becomes occupied cluster-wide it
-- cancels a held channel_vacated ARGV[2] or, if none was held, queues ARGV[3] (limit
-- ARGV[4], generation ARGV[5]). Answers {1, generation, seq, ...} when it queued, else {0}.
if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then return {0} end
if redis.call('HINCRBY', KEYS[2], ARGV[1], 1) ~= 1 then return {0} end
if redis.call('ZREM', KEYS[3], ARGV[2]) == 1 then return {0} end
local _, seqs = push(4, ARGV[3], tonumber(ARGV[4]), ARGV[5])
return emitted(1, seqs)
