-- Renew a shared lease, only for its owner (the worker's watchdog).
--   KEYS[1] the lock's shared holders (lua/acquire_shared.lua)
--   ARGV[1] owner token, ARGV[2] lease in milliseconds
-- Returns 1 when renewed, 0 when the owner's lease is gone.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local lease = tonumber(ARGV[2])
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not ends or tonumber(ends) <= now then
	return 0
end
redis.call('ZADD', KEYS[1], now + lease, ARGV[1])
if redis.call('PTTL', KEYS[1]) < lease then
	redis.call('PEXPIRE', KEYS[1], lease)
end
return 1
