-- Take a lock's exclusive lease for one owner, in the order the owners
-- came to wait for it (seckill_lock_fair).
--   KEYS[1] lock key
--   KEYS[2], KEYS[3] its shared holders and the claim of an exclusive taker
--           waiting for them (lua/acquire.lua)
--   KEYS[4] the line: owner token -> its place
--   KEYS[5] the line's leases: owner token -> when its place lapses, in
--           milliseconds of Redis's clock
--   ARGV[1] owner token, unique per acquisition, ARGV[2] lease in milliseconds
--   ARGV[3] how long a place in line (or a claim) lasts after the owner's
--           last ask, in milliseconds
--   ARGV[4] '1' when the owner waits if it cannot have the lock now: it
--           joins the end of the line, or keeps its place
-- The lock goes to the first in line once free; an owner that does not
-- wait gets it only when nobody is in line.  A place lapses when its
-- owner stops asking (it gave up, or its server died), so no ghost blocks
-- the line for longer than that.
-- Idempotent: a retry by the same owner finds the lease its own, renewed.
-- Returns 1 when the lease is the owner's; -N when the owner waits N-th in
-- line; 0 when it cannot have the lock now and does not wait.
local owner = ARGV[1]
local holder = redis.call('GET', KEYS[1])
if holder == owner then
	-- an ask whose answer was lost took it: the lease runs from this answer
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now)
for _, o in ipairs(lapsed) do
	redis.call('ZREM', KEYS[4], o)
	redis.call('ZREM', KEYS[5], o)
end
local first = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
if not holder and (not first or first == owner) then
	redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
	local claim = redis.call('GET', KEYS[3])
	if redis.call('EXISTS', KEYS[2]) == 0 then
		redis.call('SET', KEYS[1], owner, 'PX', ARGV[2])
		redis.call('ZREM', KEYS[4], owner)
		redis.call('ZREM', KEYS[5], owner)
		if claim == owner then
			redis.call('DEL', KEYS[3])
		end
		return 1
	end
	if ARGV[4] == '1' and (not claim or claim == owner) then
		redis.call('SET', KEYS[3], owner, 'PX', ARGV[3])
	end
end
if ARGV[4] ~= '1' then
	return 0
end
if not redis.call('ZSCORE', KEYS[4], owner) then
	local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
	redis.call('ZADD', KEYS[4], last[2] and tonumber(last[2]) + 1 or 1, owner)
end
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[3]), owner)
-- the line outlives none of its places, and no longer than the last
redis.call('PEXPIRE', KEYS[4], ARGV[3])
redis.call('PEXPIRE', KEYS[5], ARGV[3])
return -(redis.call('ZRANK', KEYS[4], owner) + 1)
