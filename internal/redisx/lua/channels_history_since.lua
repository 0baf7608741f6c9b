-- A recovery channel's position and, after ARGV[3] >= 0, the kept entries above it.
-- KEYS: 1 serial, 2 epoch, 3 history list. ARGV: 1 history_ttl (s), 2 epoch to take when
-- there is none, 3 after (-1 = position only).
-- Returns {epoch, serial, complete (0/1), entries...}; not complete when the range holds an
-- append Redis lost (a "-" entry).
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  epoch = ARGV[2]
  redis.call('DEL', KEYS[1], KEYS[3])
  redis.call('SET', KEYS[2], epoch, 'EX', tonumber(ARGV[1]))
  return {epoch, 0, 1}
end
local serial = tonumber(redis.call('GET', KEYS[1]) or '0')
local after = tonumber(ARGV[3])
if after < 0 or after >= serial then
  return {epoch, serial, 1}
end
local kept = redis.call('LLEN', KEYS[3])
local oldest = serial - kept + 1
if after + 1 < oldest then
  return {epoch, serial, 0}
end
local out = {epoch, serial, 1}
local entries = redis.call('LRANGE', KEYS[3], after + 1 - oldest, -1)
for i = 1, #entries do
  if entries[i] == '-' then
    -- an append Redis lost (channels_history_append.lua): the range cannot be replayed
    return {epoch, serial, 0}
  end
  out[#out + 1] = entries[i]
end
return out
