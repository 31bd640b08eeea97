-- Take a campaign's lease for admin work.
--   KEYS[1] lock key
--   ARGV[1] owner token, "<cluster>:<worker>:<count>", unique per acquisition
--   ARGV[2] lease in milliseconds
--   ARGV[3] "<cluster>:", the prefix of every token of this PostgreSQL cluster
-- Only one worker runs per cluster, so a lease held under this cluster's
-- prefix belongs to a worker that died holding it: it is taken over rather
-- than waited out.  A lease of another cluster is left alone.
-- Returns 1 when the lease is ours, 0 when another cluster holds it.
local holder = redis.call('GET', KEYS[1])
if holder and string.sub(holder, 1, #ARGV[3]) ~= ARGV[3] then
	return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
