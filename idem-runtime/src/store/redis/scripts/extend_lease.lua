-- Pushes a live attempt's lease forward. KEYS: record, lease. ARGV: token, lease ms.
local refused = fence(ARGV[1])
if refused then return refused end
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
end
return {'done'}
