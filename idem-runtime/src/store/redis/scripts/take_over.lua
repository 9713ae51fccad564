-- Takeover. KEYS: record, counter, lease, phases. ARGV: token seen, lease ms,
-- retention ms.
-- Only the attempt holding the seen token is taken over, only once its lease has ended:
-- of two retries racing here, the second finds the token changed.
local state = inspect()
if state == 'none' then return {'gone'} end
if state ~= 'ours' then return {'foreign', state} end
local k = redis.call('HMGET', record, 'state', 'token', 'gen', 'point')
if k[1] ~= 'started' or k[2] ~= ARGV[1] or redis.call('EXISTS', KEYS[3]) == 1 then
  return {'lost'}
end
local token = next_token(KEYS[2], tonumber(ARGV[3]) + tonumber(ARGV[2]))
redis.call('HSET', record, 'token', token)
redis.call('SET', KEYS[3], token, 'PX', ARGV[2])
-- A retry resumes the operation and gives it a retention again, so that its phases are
-- not lost while it runs.
local keep = math.max(redis.call('PTTL', record), tonumber(ARGV[3]))
redis.call('PEXPIRE', record, keep)
local names = keep_phases(KEYS[4], keep)
local reply = {'taken', token, k[3], k[4] or ''}
for _, name in ipairs(names) do
  reply[#reply + 1] = name
  reply[#reply + 1] = redis.call('GET', record .. ':phase:' .. name) or ''
end
return reply
