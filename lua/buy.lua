-- Purchases of one campaign's shard, one after the other, atomically: for
-- each the sale window, rate limits, one-time token, duplicate check, stock
-- decrement and journal entry.  The campaign's hash, the clock and the
-- journal are read once for all of them.
--   KEYS[1] meta hash (stock, starts, ends, state, and the traffic limits
--           user_rate, user_burst, addr_rate, addr_burst, token)
--   KEYS[2] buyers set
--   KEYS[3] journal hash: request id -> "qty:user", until PostgreSQL commits
--   then three keys a purchase: its user's rate-limit bucket, its client
--           address's, its token's spent marker
--   ARGV[1] '1' when the campaign has other shards that may lend stock
--           (lua/take.lua), ARGV[2] the worker's epoch (its PostgreSQL
--           timeline, worker/epoch.c)
--   then five arguments a purchase: user id, quantity, request id, the
--           token's expiry (microseconds since the Unix epoch; '' when the
--           call has no verified token), '1' when the client address is known
-- Returns {status, remaining stock} for each purchase, in their order.
-- Idempotent under the request id: a retry of a request that already
-- reserved answers ok again.  With other shards and too little stock here,
-- the buyer is entered with a journal entry of quantity 0 and the answer is
-- need_stock.
local nbuys = (#ARGV - 2) / 5

local m = redis.call('HMGET', KEYS[1], 'stock', 'starts', 'ends', 'state',
	'user_rate', 'user_burst', 'addr_rate', 'addr_burst', 'token', 'epoch', 'stale')
local stock, state = tonumber(m[1]), m[4]

-- every purchase answered alike
local function all(status, value)
	local out = {}
	for i = 1, nbuys do
		out[i] = {status, value}
	end
	return out
end

-- a newer primary sells this campaign; one of an older epoch (or marked
-- stale by a promotion) is rebuilt from PostgreSQL before it sells
local epoch = tonumber(m[10])
if epoch and epoch > tonumber(ARGV[2]) then
	return all('fenced', epoch)
end
-- (a stock that is no integer is not seckill's: rebuilt too)
if state == false or stock == nil or m[11] or (epoch and epoch < tonumber(ARGV[2]))
	or not string.match(m[1], '^-?%d+$') then
	return all('not_loaded', -1)
end
if state ~= 'open' then
	return all(state == 'closed' and 'ended' or 'busy', stock)
end

local reqs = {}
for i = 1, nbuys do
	reqs[i] = ARGV[2 + 5 * (i - 1) + 3]
end
local entries = redis.call('HMGET', KEYS[3], unpack(reqs))

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local starts, ends = tonumber(m[2]), m[3]
local urate, arate = tonumber(m[5]) or 0, tonumber(m[7]) or 0

local taken = 0			-- stock reserved by this call
local journal = {}		-- its journal entries: request id, "qty:user", ...
local wrote = false		-- anything written yet

-- A token bucket: burst calls at once, then rate calls per second.  Its
-- state survives a change of rate or burst; an idle bucket expires once full.
-- A bucket is read once a call and written once at its end, however many of
-- the call's purchases it admits (an address's, behind a proxy).
local buckets, bucket_keys = {}, {}
local function admitted(key, rate, burst)
	local b = buckets[key]
	if b == nil then
		local h = redis.call('HMGET', key, 'tokens', 'at')
		local tokens, at = tonumber(h[1]) or burst, tonumber(h[2]) or now
		-- a clock that went back (a failover to another node) refills nothing
		if now > at then
			tokens = tokens + (now - at) * rate / 1000000
		end
		b = {tokens = tokens}
	end
	local tokens = math.min(b.tokens, burst)
	local ok = tokens >= 1
	if ok then
		tokens = tokens - 1
	end
	-- checked here, where an error fails this purchase alone: the writes at
	-- the end of the call must not fail after the others were made
	local ttl = math.ceil(burst / rate * 1000) + 1000
	if not (ttl >= 1000 and ttl < 2 ^ 53) then
		error('the rate limit of ' .. key .. ' gives no expiry in milliseconds (' .. tostring(ttl) .. ')')
	end
	if buckets[key] == nil then
		buckets[key] = b
		bucket_keys[#bucket_keys + 1] = key
	end
	b.tokens, b.ttl = tokens, ttl
	return ok
end

local function buy(i)
	local a, k = 2 + 5 * (i - 1), 3 + 3 * (i - 1)
	local user, qty, req = ARGV[a + 1], tonumber(ARGV[a + 2]), ARGV[a + 3]

	if entries[i] then
		return {string.sub(entries[i], 1, 2) == '0:' and 'need_stock' or 'ok', stock}
	end
	if now < starts then
		return {'not_started', stock}
	end
	if ends ~= 'inf' and now >= tonumber(ends) then
		return {'ended', stock}
	end
	if urate > 0 and not admitted(KEYS[k + 1], urate, tonumber(m[6])) then
		return {'rate_limited', stock}
	end
	if arate > 0 and ARGV[a + 5] == '1' and not admitted(KEYS[k + 2], arate, tonumber(m[8])) then
		return {'rate_limited', stock}
	end

	-- The backend checked the token's signature; spend it here, once.
	if m[9] == '1' then
		local expiry = tonumber(ARGV[a + 4])
		if expiry == nil or now >= expiry then
			return {'invalid_token', stock}
		end
		local ttl = math.ceil((expiry - now) / 1000)
		local spent = redis.call('SET', KEYS[k + 3], req, 'NX', 'PX', ttl)
		wrote = true
		if not spent and redis.call('GET', KEYS[k + 3]) ~= req then
			return {'invalid_token', stock}
		end
	end

	if stock >= qty then
		local added = redis.call('SADD', KEYS[2], user)
		wrote = true
		if added == 0 then
			return {'duplicate', stock}
		end
		stock = stock - qty
		taken = taken + qty
		journal[#journal + 1] = req
		journal[#journal + 1] = qty .. ':' .. user
		return {'ok', stock}
	end
	if redis.call('SISMEMBER', KEYS[2], user) == 1 then
		return {'duplicate', stock}
	end
	if ARGV[1] ~= '1' then
		return {'sold_out', stock}
	end
	redis.call('SADD', KEYS[2], user)
	wrote = true
	journal[#journal + 1] = req
	journal[#journal + 1] = '0:' .. user
	return {'need_stock', stock}
end

-- A purchase that fails (a key of the wrong type) fails alone, before its
-- buyer is entered, and the others go on.  A refusal of writes (READONLY,
-- OOM: Redis refuses only a script's first write, so nothing is written)
-- is the whole call's answer, as the worker looks for it there.
local function refusal(message)
	for _, code in ipairs({'READONLY', 'OOM', 'NOREPLICAS', 'MISCONF'}) do
		if string.sub(message, 1, #code) == code then
			return true
		end
	end
	return false
end

local out = {}
for i = 1, nbuys do
	local done, answer = pcall(buy, i)
	if done then
		out[i] = answer
	else
		local message = type(answer) == 'table' and answer.err or tostring(answer)
		if not wrote and refusal(message) then
			return redis.error_reply(message)
		end
		out[i] = redis.error_reply(message)
	end
end
if taken > 0 then
	redis.call('HINCRBY', KEYS[1], 'stock', -taken)
end
if #journal > 0 then
	redis.call('HSET', KEYS[3], unpack(journal))
end
for _, key in ipairs(bucket_keys) do
	local b = buckets[key]
	redis.call('HSET', key, 'tokens', string.format('%.17g', b.tokens), 'at', string.format('%.0f', now))
	redis.call('PEXPIRE', key, string.format('%.0f', b.ttl))
end
return out
