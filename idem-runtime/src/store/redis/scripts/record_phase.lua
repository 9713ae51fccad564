-- A phase's output. KEYS: record, lease, phases, the phase's key. ARGV: token, phase,
-- output, lease ms. Fenced: refused once a takeover replaced the token.
local refused = fence(ARGV[1])
if refused then return refused end
local keep = redis.call('PTTL', record)
if keep > 0 then
  redis.call('SET', KEYS[4], ARGV[3], 'PX', keep)
else
  redis.call('SET', KEYS[4], ARGV[3])
end
if not redis.call('LPOS', KEYS[3], ARGV[2]) then
  redis.call('RPUSH', KEYS[3], ARGV[2])
  if keep > 0 then redis.call('PEXPIRE', KEYS[3], keep) end
end
redis.call('HSET', record, 'point', ARGV[2])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[4]) then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[4])
end
return {'done'}
