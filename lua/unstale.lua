-- A take-over found one shard of a campaign as the promoted primary's
-- PostgreSQL has it (nothing was lost: a clean switchover): the shard sells
-- again without a rebuild, unless a newer primary took it over meanwhile.
--   KEYS[1] the shard's meta hash
--   ARGV[1] the worker's epoch (its PostgreSQL timeline, worker/epoch.c)
-- Returns 1 when the shard sells again, 0 when another epoch holds it.
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then
	return 0
end
redis.call('HDEL', KEYS[1], 'stale')
return 1
