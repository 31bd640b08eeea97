-- Release a lease only for its owner.
--   KEYS[1] lock key, ARGV[1] owner token
-- Returns 1 when released, 0 when the lease was not ours (or had expired).
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('DEL', KEYS[1])
end
return 0
