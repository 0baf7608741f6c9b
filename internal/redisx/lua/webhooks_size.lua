-- One atomic read of an outbox for the ledger: queue KEYS[1], in flight KEYS[2], state
-- KEYS[3]. Answers {queued + in flight, generation ('' without a state), h, fs, in flight}.
local q, f = redis.call('LLEN', KEYS[1]), redis.call('LLEN', KEYS[2])
local st = redis.call('HMGET', KEYS[3], 'g', 'h', 'fs')
return {q + f, st[1] or '', st[2] or '0', st[3] or '0', f}
