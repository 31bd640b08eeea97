-- Release a lease only for its owner.
--   KEYS[1] lock key, ARGV[1] owner token, ARGV[2] (optional) a channel
--   where the release is announced, so that waiters elsewhere look at once
-- Returns 1 when released, 0 when the lease was not ours (or had expired).
if redis.call('GET', KEYS[1]) == ARGV[1] then
	redis.call('DEL', KEYS[1])
	if ARGV[2] then
		-- an ACL without the channel must not stop the release
		redis.pcall('PUBLISH', ARGV[2], KEYS[1])
	end
	return 1
end
return 0
