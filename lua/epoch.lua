-- Record who sells through this key prefix: the newest PostgreSQL timeline
-- (a newer one, a promoted standby, takes it over), and the run_id of the
-- Redis master written to (a new one may lack writes the old one
-- acknowledged).  The worker reads both first, and records only once it has
-- marked the campaigns a take-over concerns.
--   KEYS[1] the epoch key, KEYS[2] the master key
--   ARGV[1] the worker's timeline, ARGV[2] this master's run_id ('' unknown)
-- Returns the epoch recorded before (0: none).
local recorded = tonumber(redis.call('GET', KEYS[1]) or '0')
local mine = tonumber(ARGV[1])
if mine > recorded then
	redis.call('SET', KEYS[1], ARGV[1])
end
if mine >= recorded and ARGV[2] ~= '' then
	redis.call('SET', KEYS[2], ARGV[2])
end
return recorded
