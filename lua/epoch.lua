-- Record who sells through this key prefix: the newest PostgreSQL timeline
-- (a newer one, a promoted standby, takes it over) and the id of the
-- promotion onto it (of two standbys promoted onto one timeline, the first
-- to record itself sells), and the run_id of the Redis master written to (a
-- new one may lack writes the old one acknowledged).  The worker reads them
-- first, and records only once it has marked the campaigns a take-over
-- concerns.
--   KEYS[1] the epoch key, KEYS[2] the master key, KEYS[3] the promotion key
--   ARGV[1] the worker's timeline, ARGV[2] this master's run_id ('' unknown),
--   ARGV[3] the worker's promotion id ('' unknown)
-- Returns {the epoch recorded before (0: none), the promotion id recorded
-- with it ('' none)}: another id on the worker's own timeline means another
-- promotion holds the prefix, and nothing was recorded.
local recorded = tonumber(redis.call('GET', KEYS[1]) or '0')
local owner = redis.call('GET', KEYS[3]) or ''
local mine = tonumber(ARGV[1])
if mine == recorded and owner ~= '' and ARGV[3] ~= '' and owner ~= ARGV[3] then
	return {recorded, owner}
end
if mine > recorded then
	redis.call('SET', KEYS[1], ARGV[1])
	if ARGV[3] ~= '' then
		redis.call('SET', KEYS[3], ARGV[3])
	else
		redis.call('DEL', KEYS[3])
	end
elseif mine == recorded and owner == '' and ARGV[3] ~= '' then
	redis.call('SET', KEYS[3], ARGV[3])
end
if mine >= recorded and ARGV[2] ~= '' then
	redis.call('SET', KEYS[2], ARGV[2])
end
return {recorded, owner}
