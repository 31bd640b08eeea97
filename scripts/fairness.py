"""The waiting room's fairness, for scripts/bench.sh: people and bots buy the
same items, on a campaign without a waiting room and on ones with it, and
the bots' share of the items is compared with their share of the buyers.
The server comes from libpq's environment; the caller is a superuser (it
creates the campaigns).

    fairness.py PREFIX STOCK HUMANS BOTS ADMIT_RATE

Without the room, a person clicks "buy" once on arrival (one who came
early, within a second of the start), and once more a second later if told
busy; a bot calls seckill_buy 50 times a second from its arrival (or the
start) until it has bought or the sale is over.  With the room, everyone
joins the line on arrival; a person polls seckill_queue_status every second
and buys once admitted; a bot calls seckill_buy 50 times a second from its
arrival.  The room admits ADMIT_RATE buyers a second.

Three sales of STOCK items each:
  PREFIX-none  without the room, people and bots arriving at random from
               5 s before the start to 10 s after it (more people come
               before the start than there are items: the early crowd
               decides);
  PREFIX-room  the same crowd with the room (the early joins drawn by
               lottery at the start);
  PREFIX-fifo  with the room, everyone arriving in the 10 s after the start,
               so that the line's order is the order of arrival.
Prints a line a sale:

    SALE items_sold bot_items bot_share_of_items bot_share_of_buyers kendall_tau late_buyers failed_calls

kendall_tau being, among the people who joined after the start and bought,
the agreement of their order of purchase (their orders' ids) with their
order of joining (their tickets) (1: the same order; "-" without the room,
or with fewer than 2 such buyers).

A person is a browser of its own; to keep the harness's own CPU low, the
people of one connection whose step falls due within the same TICK share a
statement (their calls run one after another, in the order they came).
Bots each have a connection and call alone, from a process of their own.
A call that fails (an error, such as seckill.request_timeout, here 5 s) is
counted (failed_calls), the first five shown on stderr; a connection that
ends on an exception fails the run (exit status 1).
"""
import heapq
import multiprocessing
import os
import random
import sys
import threading
import time

import psycopg

OPTIONS = "-c seckill.request_timeout=5s"
BOT_RATE = 50
CONNECTIONS = 16
TICK = 0.02  # people whose step falls due within it share a statement

EARLY = 5.0  # seconds of arrivals before the start
LATE = 10.0  # and after it
LEAD = 5.0  # from the preheat to the start


def connect():
    return psycopg.connect("", autocommit=True, options=OPTIONS)


def kendall_tau(pairs):
    """Kendall's tau-a of (x, y) pairs."""
    n = len(pairs)
    if n < 2:
        return None
    concordant = discordant = 0
    for i in range(n):
        xi, yi = pairs[i]
        for j in range(i + 1, n):
            s = (xi - pairs[j][0]) * (yi - pairs[j][1])
            if s > 0:
                concordant += 1
            elif s < 0:
                discordant += 1
    return (concordant - discordant) / (n * (n - 1) / 2)


class Sale:
    def __init__(self, name, goods, queued, stock, humans, bots, admit_rate, arrivals, rng):
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
        self.over = multiprocessing.Event()  # shared with the bots' process
        lo, hi = arrivals
        self.people = sorted((self.start + rng.uniform(lo, hi), f"h{i}") for i in range(humans))
        self.bots = sorted((self.start + rng.uniform(lo, hi), f"b{i}") for i in range(bots))
        self.rng = random.Random(rng.random())
        self.lock = threading.Lock()
        self.errors = multiprocessing.Value("i", 0)  # calls that failed, the bots' included
        self.dead = 0  # threads that ended on an exception, in this process

    def wait_until(self, t):
        while not self.over.is_set() and time.monotonic() < t:
            time.sleep(min(0.05, max(0, t - time.monotonic())))

    def each(self, conn, function, column, users):
        """function(user, goods) for each of users, in order, in one
        statement: their answers (column), in the same order.  A statement
        that fails (a call's error ends it) is made again one call at a
        time, each call's error counted and its answer None: a join, a poll
        or a purchase asked twice gets the same answer or "duplicate"."""
        if not users:
            return []
        try:
            rows = conn.execute(
                f"SELECT r.{column} FROM unnest(%s::text[]) WITH ORDINALITY AS u(user_id, i),"
                f" LATERAL {function}(u.user_id, %s) r ORDER BY u.i", (users, self.goods)).fetchall()
            return [row[0] for row in rows]
        except psycopg.Error:
            pass
        answers = []
        for user in users:
            try:
                answers.append(conn.execute(f"SELECT {column} FROM {function}(%s, %s)",
                                            (user, self.goods)).fetchone()[0])
            except psycopg.Error as e:
                self.failed(f"{function}({user}): {e}".strip())
                answers.append(None)
        return answers

    def failed(self, what):
        with self.errors.get_lock():
            self.errors.value += 1
            if self.errors.value <= 5:
                print(f"fairness: sale {self.name}: {what}", file=sys.stderr, flush=True)

    def person_thread(self, people):
        """One connection's people: arrive, then (with the room) poll every
        second and buy once admitted."""
        conn = connect()
        due = [(t, user, "arrive") for t, user in people]
        heapq.heapify(due)
        while due and not self.over.is_set():
            # the steps due within TICK of the first, each late by TICK at most
            self.wait_until(due[0][0] + TICK)
            if self.over.is_set():
                break
            now = time.monotonic()
            steps = []
            while due and due[0][0] <= now:
                steps.append(heapq.heappop(due))
            if not self.queued:
                buyers = []
                for _, user, step in steps:
                    if now < self.start:
                        heapq.heappush(due, (self.start + self.rng.uniform(0, 1), user, step))
                    else:
                        buyers.append((user, step))
                answers = self.each(conn, "seckill_buy", "status", [user for user, _ in buyers])
                for (user, step), status in zip(buyers, answers):
                    if status == "busy" and step == "arrive":
                        heapq.heappush(due, (time.monotonic() + 1, user, "again"))
                continue
            joining = [user for _, user, step in steps if step == "arrive"]
            polling = [user for _, user, step in steps if step == "poll"]
            self.each(conn, "seckill_queue_join", "state", joining)
            states = self.each(conn, "seckill_queue_status", "state", polling)
            then = time.monotonic() + 1
            for user in joining:
                heapq.heappush(due, (then, user, "poll"))
            for user, state in zip(polling, states):
                if state == "waiting":
                    heapq.heappush(due, (then, user, "poll"))
            self.each(conn, "seckill_buy", "status",
                      [user for user, state in zip(polling, states) if state == "admitted"])
        conn.close()

    def bot_thread(self, arrival, bot):
        conn = connect()
        self.wait_until(arrival)
        if self.queued:
            # (a join that fails is made again, at the bot's pace)
            while not self.over.is_set():
                try:
                    conn.execute("SELECT state FROM seckill_queue_join(%s, %s)", (bot, self.goods))
                    break
                except psycopg.Error as e:
                    self.failed(f"seckill_queue_join({bot}): {e}".strip())
                    time.sleep(1 / BOT_RATE)
        else:
            self.wait_until(self.start)
        while not self.over.is_set():
            t = time.monotonic()
            try:
                status = conn.execute("SELECT status FROM seckill_buy(%s, %s)", (bot, self.goods)).fetchone()[0]
            except psycopg.Error as e:
                self.failed(f"seckill_buy({bot}): {e}".strip())
                status = None
            if status in ("ok", "duplicate", "sold_out", "ended"):
                break
            time.sleep(max(0, 1 / BOT_RATE - (time.monotonic() - t)))
        conn.close()

    def guarded(self, target, *args):
        """target(*args), an exception counted and shown, not dropped."""
        try:
            target(*args)
        except Exception as e:
            with self.lock:
                self.dead += 1
            print(f"fairness: sale {self.name}: a {target.__name__} ended: {e!r}", file=sys.stderr, flush=True)

    def threads(self, target, args):
        threads = [threading.Thread(target=self.guarded, args=(target, *a)) for a in args]
        for t in threads:
            t.start()
        return threads

    def run_bots(self):
        for t in self.threads(self.bot_thread, self.bots):
            t.join()
        sys.exit(1 if self.dead else 0)

    def run(self):
        # the bots in a process of their own, so that the people's polls do
        # not wait for the bots' turns at Python's lock
        bots = multiprocessing.Process(target=self.run_bots)
        bots.start()
        threads = []
        try:
            threads = self.threads(self.person_thread, [(self.people[k::CONNECTIONS],) for k in range(CONNECTIONS)])
            conn = connect()
            # over once PostgreSQL holds every item sold, or at the end
            while time.monotonic() < self.end:
                left = conn.execute("SELECT total_stock - sold FROM seckill.campaigns WHERE goods = %s"
                                    " AND state <> 'closed'", (self.goods,)).fetchone()[0]
                if left == 0:
                    break
                time.sleep(0.2)
        finally:
            self.over.set()
            for t in threads:
                t.join()
            bots.join()
        if bots.exitcode != 0 or self.dead:
            raise RuntimeError(f"sale {self.name}: the bots' process ended with {bots.exitcode}, "
                               f"{self.dead} people's connections on an exception")
        rows = conn.execute(
            "SELECT o.user_id, o.id, p.ticket, p.joined_at >= c.starts_at"
            " FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id"
            " LEFT JOIN seckill.queue_places p ON p.campaign_id = o.campaign_id AND p.user_id = o.user_id"
            " WHERE c.goods = %s AND c.state <> 'closed' AND o.status <> 'cancelled' ORDER BY o.id",
            (self.goods,)).fetchall()
        conn.close()
        sold = len(rows)
        bot_items = sum(1 for user, _, _, _ in rows if user.startswith("b"))
        buyers = len(self.people) + len(self.bots)
        tau = "-"
        late = 0
        if self.queued:
            pairs = [(ticket, order_id) for user, order_id, ticket, after_start in rows
                     if user.startswith("h") and after_start]
            late = len(pairs)
            value = kendall_tau(pairs)
            tau = "-" if value is None else "%.3f" % value
        print("%s %d %d %.3f %.3f %s %d %d" % (self.name, sold, bot_items,
                                               bot_items / sold if sold else 0, len(self.bots) / buyers, tau, late,
                                               self.errors.value),
              flush=True)


def main():
    prefix, stock, humans, bots, admit_rate = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]),
                                               int(sys.argv[4]), float(sys.argv[5]))
    rng = random.Random(int(os.environ.get("FAIRNESS_SEED", "1")))
    for name, queued, arrivals in (("none", False, (-EARLY, LATE)), ("room", True, (-EARLY, LATE)),
                                   ("fifo", True, (0, LATE))):
        sale = Sale(name, f"{prefix}-{name}", queued, stock, humans, bots, admit_rate, arrivals, rng)
        try:
            sale.run()
        finally:
            conn = connect()
            conn.execute("SELECT seckill_close(%s)", (sale.goods,))
            conn.close()


if __name__ == "__main__":
    main()
