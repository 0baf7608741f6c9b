-- Cancels a held member_removed ARGV[1] in KEYS[1] or, if none was held, queues ARGV[2] on
-- the outboxes of KEYS[2..] (limit ARGV[3], generation ARGV[4]).
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then return {0} end
local _, seqs = push(2, ARGV[2], tonumber(ARGV[3]), ARGV[4])
return emitted(1, seqs)
