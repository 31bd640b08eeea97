-- One purchase, atomically: sale window, rate limits, one-time token,
-- duplicate check, stock decrement and journal entry.
--   KEYS[1] meta hash (stock, starts, ends, state, and the traffic limits
--           user_rate, user_burst, addr_rate, addr_burst, token)
--   KEYS[2] buyers set
--   KEYS[3] journal hash: request id -> "qty:user", until PostgreSQL commits
--   KEYS[4] the user's rate-limit bucket, KEYS[5] the client address's
--   KEYS[6] the token's spent marker
--   ARGV[1] user id, ARGV[2] quantity, ARGV[3] request id,
--   ARGV[4] the token's expiry (microseconds since the Unix epoch; '' when
--           the call has no verified token), ARGV[5] '1' when the client
--           address is known, ARGV[6] '1' when the campaign has other
--           shards that may lend stock (lua/take.lua), ARGV[7] the worker's
--           epoch (its PostgreSQL timeline, worker/epoch.c)
-- Returns {status, remaining stock}.  Idempotent under the request id: a
-- retry of a request that already reserved answers ok again.  With other
-- shards and too little stock here, the buyer is entered with a journal
-- entry of quantity 0 and the answer is need_stock.
local user, qty, req = ARGV[1], tonumber(ARGV[2]), ARGV[3]

local m = redis.call('HMGET', KEYS[1], 'stock', 'starts', 'ends', 'state',
	'user_rate', 'user_burst', 'addr_rate', 'addr_burst', 'token', 'epoch', 'stale')
local stock, state = tonumber(m[1]), m[4]
-- a newer primary sells this campaign; one of an older epoch (or marked
-- stale by a promotion) is rebuilt from PostgreSQL before it sells
local epoch = tonumber(m[10])
if epoch and epoch > tonumber(ARGV[7]) then
	return {'fenced', epoch}
end
if state == false or stock == nil or m[11] or (epoch and epoch < tonumber(ARGV[7])) then
	return {'not_loaded', -1}
end
if state ~= 'open' then
	return {state == 'closed' and 'ended' or 'busy', stock}
end
local entry = redis.call('HGET', KEYS[3], req)
if entry then
	return {string.sub(entry, 1, 2) == '0:' and 'need_stock' or 'ok', stock}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
if now < tonumber(m[2]) then
	return {'not_started', stock}
end
if m[3] ~= 'inf' and now >= tonumber(m[3]) then
	return {'ended', stock}
end

-- A token bucket: burst calls at once, then rate calls per second.  Its
-- state survives a change of rate or burst; an idle bucket expires once full.
local function admitted(key, rate, burst)
	local b = redis.call('HMGET', key, 'tokens', 'at')
	local tokens, at = tonumber(b[1]) or burst, tonumber(b[2]) or now
	-- a clock that went back (a failover to another node) refills nothing
	if now > at then
		tokens = tokens + (now - at) * rate / 1000000
	end
	tokens = math.min(tokens, burst)
	local ok = tokens >= 1
	if ok then
		tokens = tokens - 1
	end
	redis.call('HSET', key, 'tokens', string.format('%.17g', tokens), 'at', string.format('%.0f', now))
	redis.call('PEXPIRE', key, string.format('%.0f', math.ceil(burst / rate * 1000) + 1000))
	return ok
end

local urate, arate = tonumber(m[5]) or 0, tonumber(m[7]) or 0
if urate > 0 and not admitted(KEYS[4], urate, tonumber(m[6])) then
	return {'rate_limited', stock}
end
if arate > 0 and ARGV[5] == '1' and not admitted(KEYS[5], arate, tonumber(m[8])) then
	return {'rate_limited', stock}
end

-- The backend checked the token's signature; spend it here, once.
if m[9] == '1' then
	local expiry = tonumber(ARGV[4])
	if expiry == nil or now >= expiry then
		return {'invalid_token', stock}
	end
	local ttl = math.ceil((expiry - now) / 1000)
	if not redis.call('SET', KEYS[6], req, 'NX', 'PX', ttl)
		and redis.call('GET', KEYS[6]) ~= req then
		return {'invalid_token', stock}
	end
end

if redis.call('SISMEMBER', KEYS[2], user) == 1 then
	return {'duplicate', stock}
end
if stock < qty then
	if ARGV[6] ~= '1' then
		return {'sold_out', stock}
	end
	redis.call('SADD', KEYS[2], user)
	redis.call('HSET', KEYS[3], req, '0:' .. user)
	return {'need_stock', stock}
end

stock = redis.call('HINCRBY', KEYS[1], 'stock', -qty)
redis.call('SADD', KEYS[2], user)
redis.call('HSET', KEYS[3], req, qty .. ':' .. user)
return {'ok', stock}
