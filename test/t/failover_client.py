#!/usr/bin/python3
"""A crowd for test/t/88_failover.t that logs every answer outside PostgreSQL.

    failover_client.py [--join] LOG GOODS THREADS SECONDS STOP_FILE DSN...

Each thread buys for its own users, t<thread>-1, t<thread>-2, ..., one call
after another, and appends each answer to LOG as "user status order_id ms"
("-" for no id), or "user error SQLSTATE ms" ("conn" when the connection
broke with no SQLSTATE); ms is when the answer came, in milliseconds since
the Unix epoch.  With --join its users join the campaign's waiting line
instead, and the answers are "user state ticket ms".  A connection that
fails is replaced by the first DSN that accepts one, tried in order.  Runs until STOP_FILE exists or SECONDS passed.
"""
import os
import sys
import threading
import time

import psycopg

args = sys.argv[1:]
join = args[:1] == ["--join"]
if join:
    args = args[1:]
log_path, goods, threads, seconds, stop_file = args[:5]
dsns = args[5:]
call = ("SELECT state, ticket FROM seckill_queue_join(%s, %s)" if join
        else "SELECT status, order_id FROM seckill_buy(%s, %s)")
deadline = time.monotonic() + float(seconds)
log_lock = threading.Lock()
log = open(log_path, "a", buffering=1)


def done():
    return time.monotonic() >= deadline or os.path.exists(stop_file)


def record(line):
    with log_lock:
        log.write(f"{line} {time.time_ns() // 1000000}\n")


def connect():
    while not done():
        for dsn in dsns:
            try:
                return psycopg.connect(dsn, autocommit=True, connect_timeout=2)
            except psycopg.Error:
                pass
        time.sleep(0.2)
    return None


def buyer(t):
    conn, n = None, 0
    while not done():
        if conn is None or conn.broken or conn.closed:
            if conn is not None:
                conn.close()
            conn = connect()
            if conn is None:
                break
        n += 1
        user = f"t{t}-{n}"
        try:
            status, order_id = conn.execute(call, (user, goods)).fetchone()
            record(f"{user} {status} {'-' if order_id is None else order_id}")
        except psycopg.Error as e:
            record(f"{user} error {e.sqlstate or 'conn'}")
            # a standby or a server going down answers at once: do not spin
            time.sleep(0.05)
    if conn is not None:
        conn.close()


workers = [threading.Thread(target=buyer, args=(t,)) for t in range(1, int(threads) + 1)]
for w in workers:
    w.start()
for w in workers:
    w.join()
log.close()
