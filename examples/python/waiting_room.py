"""A waiting room's browsers through psycopg 3, as docs/CLIENTS.md explains:
each buyer joins the line once, polls seckill_queue_status() every second or
two, and calls seckill_buy() once admitted; it stops at sold_out, expired or
ended.

    DATABASE_URL=postgresql://... python3 waiting_room.py GOODS FIRST LAST [POLL_SECONDS]

runs the browsers of users user-FIRST .. user-LAST on 16 connections, and
prints one line per user: "user outcome order_id", outcome being the
purchase's status, or the line's state that ended the wait.
"""
import os
import sys
import threading
import time

import psycopg

URL = os.environ["DATABASE_URL"]
OPTIONS = "-c seckill.request_timeout=2s"


def visits(users, goods, poll, report):
    """The browsers of some buyers on one connection: each joins the line
    once, then every poll seconds asks where it stands, and buys once
    admitted; a buyer is done at its purchase, or at sold_out, expired or
    ended."""
    conn = psycopg.connect(URL, options=OPTIONS, autocommit=True)
    waiting = []
    for user in users:
        # also position (NULL before the start) and ticket
        conn.execute("SELECT state FROM seckill_queue_join(%s, %s)", (user, goods))
        waiting.append(user)
    while waiting:
        time.sleep(poll)
        for user in list(waiting):
            # also position, admitted_until and estimated_wait, for the page
            state = conn.execute("SELECT state FROM seckill_queue_status(%s, %s)",
                                 (user, goods)).fetchone()[0]
            if state == "waiting":
                continue
            waiting.remove(user)
            if state != "admitted":
                report(user, state, None)
                continue
            status, order_id = conn.execute(
                "SELECT status, order_id FROM seckill_buy(%s, %s)", (user, goods)).fetchone()
            report(user, status, order_id)


def main():
    goods, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    poll = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
    users = ["user-%d" % i for i in range(first, last + 1)]
    out = threading.Lock()

    def report(user, outcome, order_id):
        with out:
            print(user, outcome, order_id if order_id is not None else "-", flush=True)

    threads = [threading.Thread(target=visits, args=(users[k::16], goods, poll, report)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
