-- One purchase, atomically: sale window, state, duplicate check, stock
-- decrement and journal entry.
--   KEYS[1] meta hash (stock, starts, ends, limit, state)
--   KEYS[2] buyers set
--   KEYS[3] journal hash: request id -> "qty:user", until PostgreSQL commits
--   ARGV[1] user id, ARGV[2] quantity, ARGV[3] request id
-- Returns {status, remaining stock}.  Idempotent under the request id: a
-- retry of a request that already reserved answers ok again.
local user, qty, req = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local m = redis.call('HMGET', KEYS[1], 'stock', 'starts', 'ends', 'state')
local stock, state = tonumber(m[1]), m[4]
if state == false or stock == nil then
	return {'not_loaded', -1}
end
if state ~= 'open' then
	return {state == 'closed' and 'ended' or 'busy', stock}
end
if redis.call('HEXISTS', KEYS[3], req) == 1 then
	return {'ok', stock}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if now < tonumber(m[2]) then
	return {'not_started', stock}
end
if m[3] ~= 'inf' and now >= tonumber(m[3]) then
	return {'ended', stock}
end
if redis.call('SISMEMBER', KEYS[2], user) == 1 then
	return {'duplicate', stock}
end
if stock < qty then
	return {'sold_out', stock}
end

stock = redis.call('HINCRBY', KEYS[1], 'stock', -qty)
redis.call('SADD', KEYS[2], user)
redis.call('HSET', KEYS[3], req, qty .. ':' .. user)
return {'ok', stock}
