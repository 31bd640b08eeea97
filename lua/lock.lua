-- Take a campaign's lease for admin work.
--   KEYS[1] lock key
--   ARGV[1] owner token, "<cluster>:tl<timeline>:<worker>:<count>", unique
--           per acquisition
--   ARGV[2] lease in milliseconds
--   ARGV[3] "<cluster>:", the prefix of every token of this PostgreSQL cluster
--   ARGV[4] the worker's timeline
-- Only one worker runs per cluster and timeline, so a lease held under this
-- cluster's prefix on the same or an older timeline belongs to a worker that
-- died holding it, or to the primary before a failover: it is taken over
-- rather than waited out.  A lease of another cluster, or of a newer
-- timeline of this one (a promoted standby), is left alone.
-- Returns 1 when the lease is ours, 0 when another holds it.
local holder = redis.call('GET', KEYS[1])
if holder then
	if string.sub(holder, 1, #ARGV[3]) ~= ARGV[3] then
		return 0
	end
	local timeline = tonumber(string.match(holder, '^[^:]*:tl(%d+):'))
	if timeline and timeline > tonumber(ARGV[4]) then
		return 0
	end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
