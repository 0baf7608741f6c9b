local score
if ARGV[3] == 'g' then score = redis.call('HGET', KEYS[2], ARGV[1]) else score = redis.call('ZSCORE', KEYS[2], ARGV[1]) end
if score and tonumber(score) > tonumber(ARGV[2]) then return {2} end
local out = {0}
local n = (#ARGV - 3) / 3
for i = 1, n do
  local e, socket, user = ARGV[3 * i + 1], ARGV[3 * i + 2], ARGV[3 * i + 3]
  if redis.call('SREM', KEYS[1], e) == 1 then
    local S, C, U = KEYS[3 * i], KEYS[3 * i + 1], KEYS[3 * i + 2]
    if redis.call('HGET', S, socket) == user then
      redis.call('HDEL', S, socket)
      if redis.call('HINCRBY', C, user, -1) <= 0 then
        redis.call('HDEL', C, user)
        redis.call('HDEL', U, user)
        table.insert(out, i)
      end
    end
  end
end
if redis.call('SCARD', KEYS[1]) == 0 then out[1] = 1 end
return out
