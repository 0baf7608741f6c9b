-- Takes hold ARGV[1] from KEYS[1] if due by ARGV[2] (ms) and queues ARGV[3] on the outboxes
-- of KEYS[3..] (limit ARGV[4], generation ARGV[6]); a channel_vacated also ends the
-- occupation's cache_miss (ARGV[5] in the set KEYS[2]).
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) > tonumber(ARGV[2]) then return {0} end
redis.call('ZREM', KEYS[1], ARGV[1])
if ARGV[5] ~= '' then redis.call('SREM', KEYS[2], ARGV[5]) end
local _, seqs = push(3, ARGV[3], tonumber(ARGV[4]), ARGV[6])
return emitted(1, seqs)
