-- The owner epoch of this key prefix: the newest PostgreSQL timeline that
-- sells through it.  A newer timeline (a promoted standby) takes it over.
--   KEYS[1] the epoch key, ARGV[1] the worker's timeline
-- Returns the epoch recorded before (0: none).
local recorded = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > recorded then
	redis.call('SET', KEYS[1], ARGV[1])
end
return recorded
