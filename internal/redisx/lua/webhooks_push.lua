-- The webhooks' push library, included before every script that queues an event.
-- push appends raw to every outbox of KEYS[from..] (pairs: the queue, then its state hash:
-- generation g, last queued e, last taken from the queue h, first in flight fs; see
-- webhooks/ledger.go), trimming each queue to limit (0: no limit). gen is the generation of
-- a state the push has to create. It returns how many events the trims dropped and, per
-- outbox, the state's generation and the event's sequence number.
local function push(from, raw, limit, gen)
  local dropped, seqs = 0, {}
  for i = from, #KEYS, 2 do
    local q, st = KEYS[i], KEYS[i + 1]
    redis.call('HSETNX', st, 'g', gen)
    local seq = redis.call('HINCRBY', st, 'e', 1)
    local n = redis.call('RPUSH', q, raw)
    if limit > 0 and n > limit then
      redis.call('LTRIM', q, n - limit, -1)
      redis.call('HINCRBY', st, 'h', n - limit)
      dropped = dropped + n - limit
    end
    redis.call('PEXPIRE', st, 86400000)
    seqs[#seqs + 1] = redis.call('HGET', st, 'g')
    seqs[#seqs + 1] = seq
  end
  return dropped, seqs
end

-- emitted is a pushing script's answer: {r, generation, sequence, ...}.
local function emitted(r, seqs)
  table.insert(seqs, 1, r)
  return seqs
end
