-- Release a lease only for its owner.
--   KEYS[1] lock key
--   KEYS[2] (optional) the claim of an exclusive taker that waits for the
--           lock's shared holders (lua/acquire.lua): given up if the owner's
--   KEYS[3], KEYS[4] (optional) the lock's fair line and its leases
--           (lua/acquire_fair.lua): the owner leaves the line
--   ARGV[1] owner token, ARGV[2] (optional) a channel where the release is
--           announced, so that waiters elsewhere look at once
-- A taker that stops waiting runs it too, to give up its claim and its
-- place in line.
-- Returns 1 when released, 0 when the lease was not ours (or had expired).
local released = 0
local gone = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	released = 1
end
if KEYS[2] and redis.call('GET', KEYS[2]) == ARGV[1] then
	gone = redis.call('DEL', KEYS[2])
end
if KEYS[4] then
	gone = gone + redis.call('ZREM', KEYS[3], ARGV[1])
	redis.call('ZREM', KEYS[4], ARGV[1])
end
if (released == 1 or gone > 0) and ARGV[2] then
	-- an ACL without the channel must not stop the release
	redis.pcall('PUBLISH', ARGV[2], KEYS[1])
end
return released
