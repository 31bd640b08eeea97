"""A shop's purchases through psycopg 3, as docs/CLIENTS.md explains: after
any error or timeout of seckill_buy(), the purchase may have been made, so
the shop asks seckill_order() for its fate and never buys again blindly.

    DATABASE_URL=postgresql://... python3 shop.py GOODS FIRST LAST

buys for users user-FIRST .. user-LAST on 16 connections, and prints one line
per user: "user status order_id how", how being "answer" (seckill_buy said
so) or "asked:SQLSTATE" (its call failed with SQLSTATE, seckill_order told).
"""
import os
import queue
import sys
import threading
import time

import psycopg

URL = os.environ["DATABASE_URL"]
# the server bounds each call's wait; psycopg has no client-side timeout to
# leave a call running unseen
OPTIONS = "-c seckill.request_timeout=2s"


class Shop:
    def __init__(self):
        self.conn = None

    def connection(self):
        """This thread's connection, made again after it was lost."""
        if self.conn is None or self.conn.closed or self.conn.broken:
            self.conn = psycopg.connect(URL, options=OPTIONS, autocommit=True)
        return self.conn

    def fate_of(self, user, goods):
        """seckill_order() waits until the worker has settled every earlier
        request, so its answer is final; it can fail too (Redis or the worker
        still away): ask again, a little later."""
        for attempt in range(1, 11):
            try:
                return self.connection().execute(
                    "SELECT status, order_id FROM seckill_order(%s, %s)", (user, goods)).fetchone()
            except psycopg.Error:
                if attempt == 10:
                    raise
                time.sleep(0.2 * attempt)

    def buy(self, user, goods):
        try:
            status, order_id = self.connection().execute(
                "SELECT status, order_id FROM seckill_buy(%s, %s)", (user, goods)).fetchone()
            return status, order_id, "answer"
        except psycopg.Error as err:
            status, order_id = self.fate_of(user, goods)
            return status, order_id, "asked:%s" % (err.sqlstate or "none")


def main():
    goods, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    users = queue.Queue()
    for i in range(first, last + 1):
        users.put("user-%d" % i)
    printing = threading.Lock()

    def work():
        shop = Shop()
        while True:
            try:
                user = users.get_nowait()
            except queue.Empty:
                return
            status, order_id, how = shop.buy(user, goods)
            with printing:
                print(user, status, "-" if order_id is None else order_id, how, flush=True)

    threads = [threading.Thread(target=work) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
