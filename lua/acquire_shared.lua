-- Take a lock's shared lease for one owner: any number of shared holders
-- coexist, none beside an exclusive holder.
--   KEYS[1] lock key (its exclusive holder)
--   KEYS[2] its shared holders: owner token -> when its lease ends, in
--           milliseconds of Redis's clock
--   KEYS[3] the claim of an exclusive taker waiting for the shared holders
--           to leave (lua/acquire.lua): no new shared holder while it lasts
--   ARGV[1] owner token, unique per acquisition, ARGV[2] lease in milliseconds
-- Idempotent: a retry by the same owner finds the lease its own, renewed.
-- Returns 1 when the owner holds the lock shared, 0 when it cannot now.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local lease = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) and
	(redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[3]) == 1) then
	return 0
end
redis.call('ZADD', KEYS[2], now + lease, ARGV[1])
-- the set outlives none of its leases, and no longer than the last
if redis.call('PTTL', KEYS[2]) < lease then
	redis.call('PEXPIRE', KEYS[2], lease)
end
return 1
