-- Finish loading a campaign from PostgreSQL and open it for sale.  The
-- buyers were staged in KEYS[4] (empty or absent when nobody has bought).
--   KEYS[1] meta hash, KEYS[2] buyers set, KEYS[3] journal hash,
--   KEYS[4] staged buyers set
--   ARGV[1] stock, ARGV[2] starts (microseconds since the Unix epoch),
--   ARGV[3] ends (same, or 'inf'), ARGV[4] per-user limit, ARGV[5] state,
--   ARGV[6] the buyers staged, ARGV[7] the worker's epoch, ARGV[8..]
--   field/value pairs of the traffic limits
-- Refuses while the journal holds reservations: they must be settled first,
-- or the stock computed from PostgreSQL would not count them.  Refuses when
-- the staged set is not what was staged (Redis restarted, or someone deleted
-- it, while the buyers were staged in steps): they are staged again.
if tonumber(redis.call('HGET', KEYS[1], 'epoch') or '0') > tonumber(ARGV[7]) then
	return redis.error_reply('SECKILL_FENCED a newer primary sells this campaign')
end
if redis.call('HLEN', KEYS[3]) > 0 then
	return redis.error_reply('SECKILL_JOURNAL journal not empty')
end
if redis.call('SCARD', KEYS[4]) ~= tonumber(ARGV[6]) then
	return redis.error_reply('SECKILL_STAGED the staged buyers were lost')
end
if redis.call('EXISTS', KEYS[4]) == 1 then
	redis.call('RENAME', KEYS[4], KEYS[2])
else
	redis.call('DEL', KEYS[2])
end
-- a fresh hash: no field or expiry of an earlier campaign with this id survives
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'stock', ARGV[1], 'starts', ARGV[2],
	'ends', ARGV[3], 'limit', ARGV[4], 'state', ARGV[5], 'epoch', ARGV[7], unpack(ARGV, 8))
return redis.call('SCARD', KEYS[2])
