-- Assigns a recovery channel's next serial, keeps the framed event and (optionally)
-- publishes it, in one call: the serial, the history and the publish cannot disagree.
-- KEYS: 1 serial, 2 epoch, 3 history list (one hash tag: the channel's topic's).
-- ARGV: 1 history_size, 2 history_ttl (s), 3 epoch to take when there is none,
--       4 except (socket id), 5 the event's JSON payload without its closing '}',
--       6 pub/sub channel ("" = do not publish), 7 "1" = SPUBLISH (Cluster),
--       8 envelope prefix (envelope_redis.go: the frame is the envelope's tail).
-- Returns {serial, frame, epoch}. A history entry is "<len(except)>:<except><frame>".
local epoch = redis.call('GET', KEYS[2])
if not epoch then
  -- The history may have been lost (keys expired, Redis restarted): a new epoch, from 0.
  epoch = ARGV[3]
  redis.call('DEL', KEYS[1], KEYS[3])
  redis.call('SET', KEYS[2], epoch)
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
local ttl = tonumber(ARGV[2])
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[2], ttl)
redis.call('EXPIRE', KEYS[3], ttl)
if ARGV[6] ~= '' then
  if ARGV[7] == '1' then
    redis.call('SPUBLISH', ARGV[6], ARGV[8] .. f)
  else
    redis.call('PUBLISH', ARGV[6], ARGV[8] .. f)
  end
end
return {n, f, epoch}
