-- Take a lock's lease for one owner (a SQL caller's lock, src/shared/lock_table.h).
--   KEYS[1] lock key
--   ARGV[1] owner token, unique per acquisition, ARGV[2] lease in milliseconds
-- Idempotent: a retry by the same owner finds the lease its own.
-- Returns 1 when the lease is the owner's, 0 when another owner holds it.
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
	return 1
end
if holder then
	return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
