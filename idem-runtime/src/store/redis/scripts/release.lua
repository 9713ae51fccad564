-- Release after a 5xx or a transient failure. KEYS: record, lease, phases. ARGV: token.
-- Fenced. With no phase recorded the key is deleted, so a retry runs as a first
-- request; with phases recorded their outputs are effects done outside, which a retry
-- must resume rather than redo: then only the lease ends, and a retry takes over at once.
-- The counter stays, so the next attempt's token is a new one.
local refused = fence(ARGV[1])
if refused then return refused end
if redis.call('LLEN', KEYS[3]) == 0 then
  redis.call('DEL', record, KEYS[2], KEYS[3])
  return {'deleted'}
end
redis.call('DEL', KEYS[2])
return {'lease_ended'}
