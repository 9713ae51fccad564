-- Claim. KEYS: record, counter, lease, phases. ARGV: fingerprint, method, path,
-- lease ms, retention ms.
-- A free key is claimed as SET NX PX would: the record (fingerprint, method, path,
-- token) with the retention as its TTL, and the lease as a key of its own holding the
-- token with the lease as its TTL.
local state = inspect()
if state ~= 'ours' and state ~= 'none' then return {'foreign', state} end
if state == 'none' then
  local token = next_token(KEYS[2], tonumber(ARGV[5]) + tonumber(ARGV[4]))
  -- A list left by an earlier life of the key is not this one's.
  redis.call('DEL', KEYS[4])
  -- The server's clock in milliseconds, for the operator's view of the key's age.
  local now = redis.call('TIME')
  local created = now[1] .. string.sub('00000' .. now[2], -6, -4)
  redis.call('HSET', record, 'idem', '1', 'fp', ARGV[1], 'method', ARGV[2], 'path', ARGV[3],
    'state', 'started', 'token', token, 'gen', token, 'created', created)
  redis.call('PEXPIRE', record, ARGV[5])
  redis.call('SET', KEYS[3], token, 'PX', ARGV[4])
  return {'claimed', token}
end
local k = redis.call('HMGET', record, 'fp', 'method', 'path', 'state', 'token', 'gen')
if k[1] ~= ARGV[1] then return {'mismatch', k[2] or '', k[3] or ''} end
if k[4] == 'completed' then
  local r = redis.call('HMGET', record, 'status', 'headers', 'body')
  return {'completed', k[6], r[1] or '', r[2] or '', r[3] or ''}
end
-- Time stands still inside a script: the lease cannot end between these two reads.
if redis.call('GET', KEYS[3]) == k[5] then
  return {'in_flight', k[5], redis.call('PTTL', KEYS[3])}
end
return {'lease_ended', k[5]}
