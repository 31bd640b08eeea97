-- Lend stock from another shard of a campaign to a buyer whose home shard
-- has none left.  The buyer's entry and checks stay in its home shard
-- (lua/buy.lua answered need_stock there); here only the stock moves.
--   KEYS[1] this shard's meta hash, KEYS[2] this shard's journal
--   ARGV[1] request id, ARGV[2] quantity, ARGV[3] user id, ARGV[4] the
--   worker's epoch (lua/buy.lua)
-- Idempotent under the request id.  Returns {'ok' | 'empty' | 'ended' |
-- 'not_loaded' | 'fenced', this shard's stock}.
local req, qty = ARGV[1], tonumber(ARGV[2])
local m = redis.call('HMGET', KEYS[1], 'stock', 'state', 'epoch', 'stale')
local stock, epoch = tonumber(m[1]), tonumber(m[3])
if epoch and epoch > tonumber(ARGV[4]) then
	return {'fenced', -1}
end
if stock == nil or m[2] == false or m[4] or (epoch and epoch < tonumber(ARGV[4])) then
	return {'not_loaded', -1}
end
if redis.call('HEXISTS', KEYS[2], req) == 1 then
	return {'ok', stock}
end
if m[2] ~= 'open' then
	return {'ended', stock}
end
if stock < qty then
	return {'empty', stock}
end
stock = redis.call('HINCRBY', KEYS[1], 'stock', -qty)
redis.call('HSET', KEYS[2], req, qty .. ':' .. ARGV[3])
return {'ok', stock}
