-- Queues ARGV[1] on the outboxes of KEYS (pairs, see webhooks_push), trimming each to
-- ARGV[2]; ARGV[3] is a new state's generation. Answers {events dropped, generation, seq, ...}.
local d, seqs = push(1, ARGV[1], tonumber(ARGV[2]), ARGV[3])
return emitted(d, seqs)
