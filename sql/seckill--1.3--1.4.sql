-- seckill 1.4: rebuilds that keep refused rebuyers.
\echo Use "ALTER EXTENSION seckill UPDATE TO '1.4'" to load this file. \quit

-- A campaign with rebuy_after_cancel = false keeps its cancelled buyers as
-- buyers in Redis.  When the worker rebuilds such a campaign from
-- PostgreSQL, it reads them in keyset pages over this index, as it reads the
-- active buyers over orders_one_active_per_user.
CREATE INDEX orders_cancelled ON seckill.orders (campaign_id, user_id) WHERE status = 'cancelled';
