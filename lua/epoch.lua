-- The owner epoch of this key prefix: the newest PostgreSQL timeline that
-- sells through it.  A newer timeline (a promoted standby) takes it over.
-- Also the master seckill writes to: a new one (a Redis failover, or a
-- restart) may lack writes the old one acknowledged.
--   KEYS[1] the epoch key, KEYS[2] the master key
--   ARGV[1] the worker's timeline, ARGV[2] this master's run_id ('' unknown)
-- Returns {the epoch recorded before (0: none), 1 if the master changed}.
local recorded = tonumber(redis.call('GET', KEYS[1]) or '0')
local mine = tonumber(ARGV[1])
if mine > recorded then
	redis.call('SET', KEYS[1], ARGV[1])
end
local changed = 0
if mine >= recorded and ARGV[2] ~= '' then
	local master = redis.call('GET', KEYS[2])
	if master and master ~= ARGV[2] then
		changed = 1
	end
	redis.call('SET', KEYS[2], ARGV[2])
end
return {recorded, changed}
