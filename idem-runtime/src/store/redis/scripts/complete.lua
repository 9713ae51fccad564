-- Completion. KEYS: record, lease, phases, counter. ARGV: token, status, header block,
-- body, retention ms. Fenced; the answer is kept for the retention from now, with the
-- key's phases and its counter.
local refused = fence(ARGV[1])
if refused then return refused end
redis.call('HSET', record, 'state', 'completed', 'status', ARGV[2], 'headers', ARGV[3],
  'body', ARGV[4])
redis.call('DEL', KEYS[2])
redis.call('PEXPIRE', record, ARGV[5])
keep_phases(KEYS[3], ARGV[5])
if redis.call('PTTL', KEYS[4]) < tonumber(ARGV[5]) then
  redis.call('PEXPIRE', KEYS[4], ARGV[5])
end
return {'done'}
