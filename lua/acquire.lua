-- Take a lock's exclusive lease for one owner (a SQL caller's lock,
-- src/shared/lock_table.h).
--   KEYS[1] lock key
--   KEYS[2], KEYS[3] (optional) its shared holders (lua/acquire_shared.lua)
--           and the claim of an exclusive taker that waits for them
--   ARGV[1] owner token, unique per acquisition, ARGV[2] lease in milliseconds
--   ARGV[3] (with KEYS[2]) how long a claim lasts after the owner's last
--           ask, in milliseconds, ARGV[4] '1' when the owner waits
-- While shared holders hold the lock, the first exclusive taker to wait
-- for them claims it: no new shared holder comes in while the claim lasts,
-- which its owner renews each time it asks again and gives up when it
-- stops waiting (lua/unlock.lua), so a stream of shared takers cannot
-- starve it.
-- Idempotent: a retry by the same owner finds the lease its own, renewed.
-- Returns 1 when the lease is the owner's, 0 when another owner holds it.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
	-- an ask whose answer was lost took it: the lease runs from this answer
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
if holder then
	return 0
end
if KEYS[2] then
	local t = redis.call('TIME')
	redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', t[1] * 1000 + math.floor(t[2] / 1000))
	local claim = redis.call('GET', KEYS[3])
	if redis.call('EXISTS', KEYS[2]) == 1 then
		if ARGV[4] == '1' and (not claim or claim == ARGV[1]) then
			redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3])
		end
		return 0
	end
	if claim == ARGV[1] then
		redis.call('DEL', KEYS[3])
	end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
