-- A take-over marks one shard of a campaign stale under the worker's epoch,
-- so that neither an older primary nor this one sells it before it is
-- checked against PostgreSQL (lua/unstale.lua) or rebuilt; a shard a newer
-- primary already holds is left as it is: no server ever lowers an epoch.
--   KEYS[1] the shard's meta hash
--   ARGV[1] the worker's epoch (its PostgreSQL timeline, worker/epoch.c),
--   ARGV[2] why it is stale ('promotion' or 'redis')
-- Returns {0, the shard's stock (nil when not loaded)} when marked, or
-- {1, the newer epoch} when a newer primary holds the shard.
local epoch = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0')
if epoch > tonumber(ARGV[1]) then
	return {1, epoch}
end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'stale', ARGV[2])
return {0, redis.call('HGET', KEYS[1], 'stock')}
