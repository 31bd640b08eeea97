-- Record a block of order ids before any of them is used: the highest id
-- ever handed out through this Redis, which a promoted standby whose
-- sequence lost the last blocks to asynchronous replication skips past.
--   KEYS[1] the ids key, ARGV[1] the block's first id, ARGV[2] its last
-- Returns 0 when the block is recorded, else the highest id recorded, which
-- the block overlaps.
local highest = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) <= highest then
	return highest
end
redis.call('SET', KEYS[1], ARGV[2])
return 0
