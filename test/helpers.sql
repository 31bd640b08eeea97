-- Shared by the stampede test and the demo: try_buy() keeps every answer of
-- seckill_buy(), errors included, so that the run can be checked afterwards.
-- Recreated on each run.
SET client_min_messages = warning;

DROP TABLE IF EXISTS stampede_answers;
CREATE TABLE stampede_answers (
	user_id text,
	status text,
	order_id bigint,
	err text,
	took_ms float8
);

DROP FUNCTION IF EXISTS try_buy(text, text);
CREATE OR REPLACE FUNCTION try_buy(u text, g text, t text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	t0 timestamptz := clock_timestamp();
BEGIN
	-- the three-argument seckill_buy unless there is a token
	INSERT INTO stampede_answers
	SELECT u, b.status, b.order_id, NULL,
		   extract(epoch FROM clock_timestamp() - t0) * 1000
	FROM seckill_buy(u, g) b WHERE t IS NULL
	UNION ALL
	SELECT u, b.status, b.order_id, NULL,
		   extract(epoch FROM clock_timestamp() - t0) * 1000
	FROM seckill_buy(u, g, 1, t) b WHERE t IS NOT NULL;
EXCEPTION WHEN OTHERS THEN
	INSERT INTO stampede_answers VALUES (u, 'error', NULL, SQLSTATE || ' ' || SQLERRM,
		extract(epoch FROM clock_timestamp() - t0) * 1000);
END
$$;
