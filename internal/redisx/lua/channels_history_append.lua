-- Assigns a recovery channel's next serial, keeps the framed event and (optionally)
-- publishes it, in one call: the serial, the history and the publish cannot disagree.
-- KEYS: 1 serial, 2 epoch, 3 history list, 4 last sequence per publishing node (one hash
--       tag: the channel's topic's, or the broadcast channel's).
-- ARGV: 1 history_size, 2 history_ttl (s), 3 epoch to take when there is none,
--       4 except (socket id), 5 the event's JSON payload without its closing '}',
--       6 pub/sub channel ("" = do not publish), 7 "1" = SPUBLISH (Cluster),
--       8 envelope prefix (envelope_redis.go: the epoch's length byte, the epoch and the
--         frame are the envelope's tail),
--       9 publishing node ("" = no retry check), 10 its sequence number of the publish,
--       11 the epoch and 12 the serial the publishing node last saw this channel at ("" =
--          none): Redis holding that epoch at a lower serial lost appends it had answered
--          (a failover to a replica that lacked them). Their serials are never given again:
--          the serial moves on to the one seen, and the history keeps a "-" mark for each
--          lost one (a resume that needs it is told too_old); past history_size marks the
--          list is emptied instead.
-- Returns {serial, frame, epoch}; {0, "", epoch} when the node's publish of that sequence
-- number (or a later one) already ran: the writer retried a batch that had reached Redis.
-- A history entry is "<len(except)>:<except><frame>".
local ttl = tonumber(ARGV[2])
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  -- The history may have been lost (keys expired, Redis restarted): a new epoch, from 0.
  epoch = ARGV[3]
  redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
  redis.call('SET', KEYS[2], epoch, 'EX', ttl)
end
if ARGV[9] ~= '' then
  local last = redis.call('HGET', KEYS[4], ARGV[9])
  if last and tonumber(last) >= tonumber(ARGV[10]) then
    return {0, '', epoch}
  end
  redis.call('HSET', KEYS[4], ARGV[9], ARGV[10])
  redis.call('EXPIRE', KEYS[4], ttl)
end
if ARGV[11] ~= '' and epoch == ARGV[11] then
  local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
  local seen = tonumber(ARGV[12])
  if cur < seen then
    if seen - cur >= tonumber(ARGV[1]) then
      redis.call('DEL', KEYS[3])
    else
      for _ = cur + 1, seen do
        redis.call('RPUSH', KEYS[3], '-')
      end
    end
    redis.call('SET', KEYS[1], seen) -- the EXPIREs below follow on every path from here
  end
end
local n = redis.call('INCR', KEYS[1])
local p = ARGV[5] .. ',"serial":' .. n .. '}'
local len = #p
local h
if len < 126 then
  h = string.char(0x81, len)
elseif len <= 0xFFFF then
  h = string.char(0x81, 126, math.floor(len / 256), len % 256)
else
  h = string.char(0x81, 127, 0, 0, 0, 0, math.floor(len / 16777216) % 256,
    math.floor(len / 65536) % 256, math.floor(len / 256) % 256, len % 256)
end
local f = h .. p
redis.call('RPUSH', KEYS[3], #ARGV[4] .. ':' .. ARGV[4] .. f)
redis.call('LTRIM', KEYS[3], -tonumber(ARGV[1]), -1)
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
redis.call('EXPIRE', KEYS[3], ttl)
if ARGV[6] ~= '' then
  local env = ARGV[8] .. string.char(#epoch) .. epoch .. f
  if ARGV[7] == '1' then
    redis.call('SPUBLISH', ARGV[6], env)
  else
    redis.call('PUBLISH', ARGV[6], env)
  end
end
return {n, f, epoch}
