-- Queues cache_miss ARGV[2] for channel ARGV[1] only for the first miss of its occupation
-- (the set KEYS[1]); outboxes KEYS[2..], limit ARGV[3], generation ARGV[4].
if redis.call('SADD', KEYS[1], ARGV[1]) == 0 then return {0} end
local _, seqs = push(2, ARGV[2], tonumber(ARGV[3]), ARGV[4])
return emitted(1, seqs)
