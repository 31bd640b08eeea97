"""The waiting room's fairness, for scripts/bench.sh: people and bots buy the
same items, on a campaign without a waiting room and on ones with it, and
the bots' share of the items is compared with their share of the buyers.
The server comes from libpq's environment; the caller is a superuser (it
creates the campaigns).

    fairness.py PREFIX STOCK HUMANS BOTS ADMIT_RATE

People and bots arrive alike, at random from 5 s before the start to 10 s
after it.  Without the room, a person clicks "buy" once on arrival (one who
came early, within a second of the start), and once more a second later if
told busy; a bot calls seckill_buy 50 times a second from its arrival (or
the start) until it has bought or the sale is over.  With the room,
everyone joins the line on arrival; a person polls seckill_queue_status
every second and buys once admitted; a bot calls seckill_buy 50 times a
second from its arrival.  The room admits ADMIT_RATE buyers a second.

Three sales: PREFIX-none and PREFIX-room of STOCK items (fewer than the
people who come before the start: the early crowd decides), and
PREFIX-fifo with the room and 3 x STOCK items, so that people who join
after the start buy too.  Prints a line a sale:

    SALE items_sold bot_items bot_share_of_items bot_share_of_buyers kendall_tau late_buyers

kendall_tau being, among the people who joined after the start and bought,
the agreement of their order of purchase with their order of joining (1:
the same order; "-" without the room, or with fewer than 2 such buyers).
"""
import os
import random
import sys
import threading
import time

import psycopg

OPTIONS = "-c seckill.request_timeout=5s"
BOT_RATE = 50
CONNECTIONS = 16


def connect():
    return psycopg.connect("", autocommit=True, options=OPTIONS)


def kendall_tau(pairs):
    """Kendall's tau-a of (x, y) pairs."""
    n = len(pairs)
    if n < 2:
        return None
    concordant = discordant = 0
    for i in range(n):
        for j in range(i + 1, n):
            s = (pairs[i][0] - pairs[j][0]) * (pairs[i][1] - pairs[j][1])
            if s > 0:
                concordant += 1
            elif s < 0:
                discordant += 1
    return (concordant - discordant) / (n * (n - 1) / 2)


EARLY = 5.0  # seconds of arrivals before the start
LATE = 10.0  # and after it
LEAD = 5.0  # from the preheat to the start


class Sale:
    def __init__(self, name, goods, queued, stock, humans, bots, admit_rate, rng):
        self.name = name
        self.goods = goods
        self.queued = queued
        conn = connect()
        conn.execute("SELECT seckill_campaign_create(%s, %s, now() + make_interval(secs => %s))",
                     (goods, stock, LEAD))
        if queued:
            conn.execute("SELECT seckill_campaign_set(%s, jsonb_build_object('queue', jsonb_build_object("
                         "'admit_rate', %s::float8, 'pass_ttl', '1 minute')))", (goods, admit_rate))
        conn.execute("SELECT seckill_preheat(%s)", (goods,))
        conn.close()
        self.start = time.monotonic() + LEAD
        self.end = self.start + LATE + 30
        self.over = threading.Event()
        arrivals = sorted((self.start + rng.uniform(-EARLY, LATE), f"h{i}") for i in range(humans))
        self.people = arrivals
        self.bots = sorted((self.start + rng.uniform(-EARLY, LATE), f"b{i}") for i in range(bots))
        self.joined = {}  # user: monotonic time of its join's answer
        self.rng = random.Random(rng.random())

    def wait_until(self, t):
        while not self.over.is_set() and time.monotonic() < t:
            time.sleep(min(0.05, max(0, t - time.monotonic())))

    def buy(self, conn, user):
        return conn.execute("SELECT status FROM seckill_buy(%s, %s)", (user, self.goods)).fetchone()[0]

    def join(self, conn, user):
        conn.execute("SELECT state FROM seckill_queue_join(%s, %s)", (user, self.goods))
        self.joined[user] = time.monotonic()

    def status(self, conn, user):
        return conn.execute("SELECT state FROM seckill_queue_status(%s, %s)", (user, self.goods)).fetchone()[0]

    def person_thread(self, people):
        """One connection's people, each in turn: arrive, then (with the
        room) poll every second and buy once admitted."""
        conn = connect()
        pending = []  # (next action time, user, step)
        for t, user in people:
            pending.append((t, user, "arrive"))
        while pending and not self.over.is_set():
            pending.sort()
            t, user, step = pending.pop(0)
            self.wait_until(t)
            if self.over.is_set():
                break
            if not self.queued:
                if time.monotonic() < self.start:
                    pending.append((self.start + self.rng.uniform(0, 1), user, "arrive"))
                    continue
                status = self.buy(conn, user)
                if status == "busy" and step == "arrive":
                    pending.append((time.monotonic() + 1, user, "again"))
                continue
            if step == "arrive":
                self.join(conn, user)
                pending.append((time.monotonic() + 1, user, "poll"))
                continue
            state = self.status(conn, user)
            if state == "waiting":
                pending.append((time.monotonic() + 1, user, "poll"))
            elif state == "admitted":
                self.buy(conn, user)
        conn.close()

    def bot_thread(self, arrival, bot):
        conn = connect()
        self.wait_until(arrival)
        if self.queued:
            self.join(conn, bot)
        else:
            self.wait_until(self.start)
        while not self.over.is_set():
            t = time.monotonic()
            status = self.buy(conn, bot)
            if status in ("ok", "duplicate", "sold_out", "ended"):
                break
            time.sleep(max(0, 1 / BOT_RATE - (time.monotonic() - t)))
        conn.close()

    def run(self):
        threads = [threading.Thread(target=self.person_thread, args=(self.people[k::CONNECTIONS],))
                   for k in range(CONNECTIONS)]
        threads += [threading.Thread(target=self.bot_thread, args=bot) for bot in self.bots]
        for t in threads:
            t.start()
        conn = connect()
        # over once PostgreSQL holds every item sold, or at the end
        while time.monotonic() < self.end:
            left = conn.execute("SELECT total_stock - sold FROM seckill.campaigns WHERE goods = %s"
                                " AND state <> 'closed'", (self.goods,)).fetchone()[0]
            if left == 0:
                break
            time.sleep(0.2)
        self.over.set()
        for t in threads:
            t.join()
        rows = conn.execute(
            "SELECT o.user_id, o.id FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id"
            " WHERE c.goods = %s AND c.state <> 'closed' AND o.status <> 'cancelled' ORDER BY o.id",
            (self.goods,)).fetchall()
        conn.close()
        sold = len(rows)
        bot_items = sum(1 for user, _ in rows if user.startswith("b"))
        buyers = len(self.people) + len(self.bots)
        tau = "-"
        late = 0
        if self.queued:
            start_wall = self.start
            pairs = [(self.joined[user], order_id) for user, order_id in rows
                     if user.startswith("h") and user in self.joined and self.joined[user] > start_wall]
            late = len(pairs)
            value = kendall_tau(pairs)
            tau = "-" if value is None else "%.3f" % value
        print("%s %d %d %.3f %.3f %s %d" % (self.name, sold, bot_items,
                                            bot_items / sold if sold else 0, len(self.bots) / buyers, tau, late),
              flush=True)


def main():
    prefix, stock, humans, bots, admit_rate = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                               int(sys.argv[4]), float(sys.argv[5]))
    rng = random.Random(int(os.environ.get("FAIRNESS_SEED", "1")))
    for name, queued, items in (("none", False, stock), ("room", True, stock), ("fifo", True, 3 * stock)):
        sale = Sale(name, f"{prefix}-{name}", queued, items, humans, bots, admit_rate, rng)
        sale.run()
        conn = connect()
        conn.execute("SELECT seckill_close(%s)", (sale.goods,))
        conn.close()


if __name__ == "__main__":
    main()
