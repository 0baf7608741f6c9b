-- Extends lease KEYS[1] to ARGV[2] ms if owner ARGV[1] holds it: 1, else 0.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
