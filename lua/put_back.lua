-- Put a SQL caller's lease back after Redis lost it (restarted empty,
-- flushed, failed over to a replica that missed it) while the worker still
-- holds the lock for its owner (src/worker/lock_keeper.c): every taker of
-- this PostgreSQL cluster goes through that worker, so none is granted the
-- lock before it is back.
--   KEYS[1] lock key (its exclusive holder), KEYS[2] its shared holders
--           (lua/acquire_shared.lua)
--   ARGV[1] owner token, ARGV[2] what is left of its lease in milliseconds,
--   ARGV[3] '1' when it is held shared
-- Returns 1 when the lease is the owner's again (or still was), 0 when
-- another owner took the lock meanwhile: the owner has lost it.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local left = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if ARGV[3] == '1' then
	if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
		return 1
	end
	if redis.call('EXISTS', KEYS[1]) == 1 then
		return 0
	end
	redis.call('ZADD', KEYS[2], now + left, ARGV[1])
	if redis.call('PTTL', KEYS[2]) < left then
		redis.call('PEXPIRE', KEYS[2], left)
	end
	return 1
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
	return 1
end
if holder or redis.call('EXISTS', KEYS[2]) == 1 then
	return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', left)
return 1
