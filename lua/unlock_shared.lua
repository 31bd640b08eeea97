-- Give a shared lease back, only for its owner.
--   KEYS[1] the lock's shared holders (lua/acquire_shared.lua)
--   KEYS[2] lock key, named where the release is announced
--   ARGV[1] owner token, ARGV[2] (optional) a channel where the lock is
--           announced free once its last shared holder left, so that
--           exclusive waiters elsewhere look at once
-- Returns 1 when released, 0 when the lease was not ours (or had expired).
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ends = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not ends then
	return 0
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[2] and redis.call('EXISTS', KEYS[1]) == 0 then
	-- an ACL without the channel must not stop the release
	redis.pcall('PUBLISH', ARGV[2], KEYS[2])
end
if tonumber(ends) <= now then
	return 0
end
return 1
