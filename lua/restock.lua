-- Give back the stock of orders PostgreSQL has cancelled.
--   KEYS[1] meta hash, KEYS[2] buyers set
--   ARGV[1] quantity, ARGV[2] '1' when the buyers may buy again,
--   ARGV[3] the worker's epoch, ARGV[4..] the buyers
-- Runs once per cancellation: PostgreSQL's status change from reserved to
-- cancelled happens once, and the worker sends this right after it commits.
-- Returns the stock now in Redis, or -1 when the campaign is not loaded
-- (a later preheat or reconcile takes the stock from PostgreSQL anyway), or
-- -2 when a newer primary sells it (this worker's epoch is older).
if redis.call('EXISTS', KEYS[1]) == 0 then
	return -1
end
if tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0') > tonumber(ARGV[3]) then
	return -2
end
if ARGV[2] == '1' then
	for i = 4, #ARGV do
		redis.call('SREM', KEYS[2], ARGV[i])
	end
end
return redis.call('HINCRBY', KEYS[1], 'stock', tonumber(ARGV[1]))
