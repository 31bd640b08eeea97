-- Give a reservation back: the stock, and the buyer's place.
--   KEYS[1] meta hash, KEYS[2] buyers set, KEYS[3] journal hash
--   ARGV[1] request id, ARGV[2] 'keep' when the user stays a buyer (PostgreSQL
--   refused the order because the user already has one), ARGV[3] the
--   worker's epoch: a worker of an older one gives nothing back
-- Idempotent: only a reservation still in the journal is given back, and the
-- journal entry goes with it.  Returns {1 if given back else 0, stock}.
local m = redis.call('HMGET', KEYS[1], 'stock', 'epoch')
local stock = tonumber(m[1])
if tonumber(m[2] or '0') > tonumber(ARGV[3]) then
	return {0, -2}
end
local entry = redis.call('HGET', KEYS[3], ARGV[1])
if not entry then
	return {0, stock or -1}
end
local sep = string.find(entry, ':', 1, true)
local qty = tonumber(string.sub(entry, 1, sep - 1))
local user = string.sub(entry, sep + 1)
if stock then
	stock = redis.call('HINCRBY', KEYS[1], 'stock', qty)
end
if ARGV[2] ~= 'keep' then
	redis.call('SREM', KEYS[2], user)
end
redis.call('HDEL', KEYS[3], ARGV[1])
return {1, stock or -1}
