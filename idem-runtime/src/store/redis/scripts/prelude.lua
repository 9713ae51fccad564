-- Shared by every script. KEYS[1] is the key's record: a hash with the field idem = '1',
-- under the hash tag {scope:key} that every other key of this idem key shares, so all
-- of them sit in one cluster slot. Tokens stay strings from end to end: they are near
-- 2^51, and a Lua number handed to redis.call may be printed with fewer digits.
local record = KEYS[1]

-- 'none', 'ours', or the type of a value idem did not write.
local function inspect()
  local kind = redis.call('TYPE', record).ok
  if kind == 'none' then return 'none' end
  if kind ~= 'hash' then return kind end
  if redis.call('HGET', record, 'idem') ~= '1' then return 'hash without idem\'s mark' end
  return 'ours'
end

-- The next fencing token from the key's own counter. A counter that is missing (never
-- made, or expired with the key) starts at the server's clock in microseconds, so a
-- token once handed out is not handed out again after the counter expired.
local function next_token(counter, keep)
  if redis.call('EXISTS', counter) == 0 then
    local now = redis.call('TIME')
    redis.call('SET', counter, now[1] .. string.sub('00000' .. now[2], -6))
  end
  redis.call('INCR', counter)
  redis.call('PEXPIRE', counter, keep)
  return redis.call('GET', counter)
end

-- Whether the attempt holding token still holds the key (nil), or the reply saying why
-- not.
local function fence(token)
  local state = inspect()
  if state == 'none' then return {'gone'} end
  if state ~= 'ours' then return {'foreign', state} end
  local k = redis.call('HMGET', record, 'state', 'token')
  if k[1] ~= 'started' or k[2] ~= token then return {'fenced'} end
  return nil
end

-- Gives every recorded phase of the key the time to live keep (milliseconds). The phase
-- keys are named from KEYS[1], with its hash tag: the same slot as the declared keys.
local function keep_phases(phases, keep)
  local names = redis.call('LRANGE', phases, 0, -1)
  if #names > 0 then redis.call('PEXPIRE', phases, keep) end
  for _, name in ipairs(names) do
    redis.call('PEXPIRE', record .. ':phase:' .. name, keep)
  end
  return names
end

