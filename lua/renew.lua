-- Renew a lock's lease, only for its owner (the worker's watchdog).
--   KEYS[1] lock key, ARGV[1] owner token, ARGV[2] lease in milliseconds
-- Returns 1 when renewed, 0 when the lease is gone or another owner's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
