#!/usr/bin/python3
"""The client of test/t/24_random_faults.t: it buys through faults and logs
every answer outside PostgreSQL, then tells the fates and the request slots
once the faults are healed.  The servers come from libpq's environment
(PGHOST, PGPORT, PGUSER, PGDATABASE).

    fault_client.py run LOG MONITOR STOP_FILE SEED CONNECTIONS PAIRS GOODS:POOL[:WEIGHT[:queue]]...

CONNECTIONS buy on the campaigns of GOODS, chosen in proportion to their
WEIGHT (default 1), each call for a user u<n> drawn from that campaign's
POOL: a number of users, or "sliding", a pool that
grows by 40 new users a second while the last 400 repeat.  On a campaign
marked "queue" (a waiting room) each call joins the line first, logged as

    J t0 t1 conn user goods state ticket sqlstate timeout_ms ref message

and buys only when the line says admitted or used.  PAIRS of the
connections make double clicks: half the time, the second of a pair sends
the same purchase as the first at the same moment, on its own connection.  A fifth of the
calls run with seckill.request_timeout between 50 and 200 ms.  Until
STOP_FILE exists, each answer is appended to LOG, one tab-separated line:

    A t0 t1 conn user goods status order_id sqlstate timeout_ms ref message

t0 and t1 in ms since the epoch, status "error" for an error (sqlstate
"conn" when the connection broke without one), \\N for what is missing
(ref always).
After an error whose fate is unknown (docs/REFERENCE.md: "ask seckill_order()") the
connection asks seckill_order() up to 8 times, and logs what it was told:

    R t0 t1 conn user goods status order_id sqlstate timeout_ms ref message

ref being the t0 of the call it asks about, status "error" if every attempt
failed.  Four times a second a monitor appends to MONITOR what PostgreSQL
holds unsold of each campaign: "t0 t1 goods total_stock-sold".

    fault_client.py resolve LOG OUT

For every user and goods with an answer of unknown fate in LOG: what
seckill_order() answers now, and what seckill.orders holds, to OUT:
"user goods status order_id sqlstate table_status table_order_id".

    fault_client.py locks LOG STOP_FILE HOLDERS NAME

HOLDERS connections take the fair lock NAME in turn (waiting up to 5 s),
hold it 5 to 30 ms and release it, until STOP_FILE exists.  Each hold to
LOG: "H conn token t_from t_to kept", t_from right after the grant and t_to
right before the release by PostgreSQL's clock (microseconds), kept what
seckill_unlock() answered (\\N when it failed, t_to \\N when the session
broke first); each failed call: "E conn t sqlstate message".

    fault_client.py alone LOG

The holds of LOG checked: "holds N ended E unlocked_false F overlaps O
older_tokens T": of the holds that ended (t_to known; whatever the release
answered: false when the lease had gone, or Redis failed then), those that
began before an earlier one ended, and those whose token is older than one
granted before them.

    fault_client.py slots SESSIONS GOODS OUT

SESSIONS new connections, all open at once, ask seckill_order() of GOODS,
a request the worker serves: once; twice each while the worker is frozen,
so that a backend whose slot was lost says so; once more after.  Each
answer to OUT as "phase answered" or "phase sqlstate message", and a last
line "calls N".
"""
import os
import queue
import random
import signal
import sys
import threading
import time
import traceback

import psycopg

# what a client cannot learn from the error itself: the purchase may be made
UNKNOWN_FATE = {"SK001", "SK003", "38000", "57014"}
OPTIONS = "-c statement_timeout=20s"


def now_ms():
    return int(time.time() * 1000)


def field(value):
    if value is None:
        return "\\N"
    return str(value).replace("\\", "/").replace("\t", " ").replace("\n", " | ").replace("\r", "")


def unknown_fate(sqlstate):
    """SQLSTATEs after which the purchase may have been made: seckill's
    (docs/REFERENCE.md's table of errors), a cancel, and a connection that broke or was
    terminated by a server going down."""
    return (sqlstate is None or sqlstate == "conn" or sqlstate in UNKNOWN_FATE
            or sqlstate.startswith("08") or sqlstate.startswith("57P"))


def connect():
    return psycopg.connect("", autocommit=True, connect_timeout=2, options=OPTIONS)


class Log:
    def __init__(self, path):
        self.file = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, *fields):
        line = "\t".join(field(f) for f in fields)
        with self.lock:
            self.file.write(line + "\n")


class Buyer:
    """One connection: its purchases, and the fates it asks after errors."""

    def __init__(self, number, stopping, log):
        self.number = number
        self.stopping = stopping
        self.log = log
        self.conn = None
        self.timeout = None  # the session's seckill.request_timeout, None: default

    def connection(self):
        while self.conn is None or self.conn.closed or self.conn.broken:
            if self.conn is not None:
                self.conn.close()
                self.conn = None
            try:
                self.conn = connect()
                self.timeout = None
            except psycopg.Error:
                if self.stopping():
                    return None
                time.sleep(0.2)
        return self.conn

    def set_timeout(self, ms):
        """seckill.request_timeout for the next calls: ms, or None for 5 s"""
        if ms == self.timeout:
            return
        if ms is None:
            self.conn.execute("RESET seckill.request_timeout")
        else:
            self.conn.execute("SELECT set_config('seckill.request_timeout', %s, false)", (f"{ms}ms",))
        self.timeout = ms

    def join(self, user, goods, timeout):
        """The user's place in the line: its state, None after an error."""
        t0 = now_ms()
        try:
            state, ticket = self.conn.execute(
                "SELECT state, ticket FROM seckill_queue_join(%s, %s)", (user, goods)).fetchone()
            self.log.write("J", t0, now_ms(), self.number, user, goods, state, ticket, None, timeout, None, None)
            return state
        except psycopg.Error as err:
            self.log.write("J", t0, now_ms(), self.number, user, goods, "error", None,
                           err.sqlstate or "conn", timeout, None, err)
            return None

    def buy(self, user, goods, timeout, queued=False):
        if self.connection() is None:
            return
        try:
            self.set_timeout(timeout)
        except psycopg.Error:
            return  # nothing was asked: the connection is made again
        if queued and self.join(user, goods, timeout) not in ("admitted", "used"):
            return
        t0 = now_ms()
        try:
            status, order_id = self.conn.execute(
                "SELECT status, order_id FROM seckill_buy(%s, %s)", (user, goods)).fetchone()
            self.log.write("A", t0, now_ms(), self.number, user, goods, status, order_id, None, timeout, None, None)
        except psycopg.Error as err:
            sqlstate = err.sqlstate or "conn"
            self.log.write("A", t0, now_ms(), self.number, user, goods, "error", None, sqlstate, timeout, None, err)
            if unknown_fate(sqlstate):
                self.ask(user, goods, t0)

    def ask(self, user, goods, ref):
        """docs/CLIENTS.md's rule: after an error of unknown fate, ask
        seckill_order(), again a little later while it fails too"""
        err = None
        for attempt in range(8):
            if self.connection() is None:
                break
            t0 = now_ms()
            try:
                self.set_timeout(2000)
                status, order_id = self.conn.execute(
                    "SELECT status, order_id FROM seckill_order(%s, %s)", (user, goods)).fetchone()
                self.log.write("R", t0, now_ms(), self.number, user, goods, status, order_id, None, None, ref, None)
                return
            except psycopg.Error as e:
                err = e
                time.sleep(0.1 + 0.2 * attempt)
        self.log.write("R", now_ms(), now_ms(), self.number, user, goods, "error", None,
                       (err.sqlstate or "conn") if err else "conn", None, ref, err)

    def close(self):
        if self.conn is not None:
            self.conn.close()


class Pools:
    """The users each campaign's purchases are drawn from."""

    def __init__(self, specs):
        self.started = time.monotonic()
        self.goods = []
        self.sizes = []
        self.weights = []
        self.queued = []
        for spec in specs:
            goods, pool, *rest = spec.split(":")
            self.goods.append(goods)
            self.sizes.append(pool)
            self.weights.append(int(rest[0]) if rest else 1)
            self.queued.append(rest[1:] == ["queue"])

    def draw(self, rng):
        i = rng.choices(range(len(self.goods)), self.weights)[0]
        if self.sizes[i] == "sliding":
            top = 400 + int((time.monotonic() - self.started) * 40)
            n = rng.randint(top - 399, top)
        else:
            n = rng.randint(1, int(self.sizes[i]))
        return f"u{n}", self.goods[i], self.queued[i]


def run(log_path, monitor_path, stop_file, seed, connections, pairs, specs):
    seed, connections, pairs = int(seed), int(connections), int(pairs)
    log = Log(log_path)
    monitor_log = Log(monitor_path)
    pools = Pools(specs)
    stop = threading.Event()

    def stopping():
        return stop.is_set()

    def choose(rng):
        user, goods, queued = pools.draw(rng)
        timeout = rng.randint(50, 200) if rng.random() < 0.2 else None
        return user, goods, timeout, queued

    def guarded(body):
        def thread_main(*args):
            while not stop.is_set():
                try:
                    body(*args)
                    return
                except Exception:  # a bug of this client: say so, carry on
                    traceback.print_exc()
                    time.sleep(0.2)
        return thread_main

    def alone(number):
        rng = random.Random(seed * 1000 + number)
        buyer = Buyer(number, stopping, log)
        while not stop.is_set():
            buyer.buy(*choose(rng))
            time.sleep(rng.uniform(0, 0.03))
        buyer.close()

    def leader(number, clicks):
        rng = random.Random(seed * 1000 + number)
        buyer = Buyer(number, stopping, log)
        while not stop.is_set():
            call = choose(rng)
            if rng.random() < 0.5 and clicks.empty():
                clicks.put(call)
            buyer.buy(*call)
            time.sleep(rng.uniform(0, 0.03))
        buyer.close()

    def follower(number, clicks):
        buyer = Buyer(number, stopping, log)
        while not stop.is_set():
            try:
                call = clicks.get(timeout=0.2)
            except queue.Empty:
                continue
            buyer.buy(*call)
        buyer.close()

    def monitor():
        conn = None
        while not stop.is_set():
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = connect()
                t0 = now_ms()
                rows = conn.execute(
                    "SELECT goods, total_stock - sold FROM seckill.campaigns"
                    " WHERE goods = ANY(%s) AND state <> 'closed'", (pools.goods,)).fetchall()
                t1 = now_ms()
                for goods, unsold in rows:
                    monitor_log.write(t0, t1, goods, unsold)
            except psycopg.Error:
                pass
            time.sleep(0.25)

    threads = [threading.Thread(target=guarded(monitor))]
    number = 0
    for _ in range(pairs):
        clicks = queue.Queue(maxsize=1)
        threads.append(threading.Thread(target=guarded(leader), args=(number, clicks)))
        threads.append(threading.Thread(target=guarded(follower), args=(number + 1, clicks)))
        number += 2
    while number < connections:
        threads.append(threading.Thread(target=guarded(alone), args=(number,)))
        number += 1
    for t in threads:
        t.start()
    while not os.path.exists(stop_file):
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join()


def locks(log_path, stop_file, holders, name):
    log = Log(log_path)
    clock = "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint"

    def holder(number):
        conn = None
        while not os.path.exists(stop_file):
            token = t_from = t_to = None
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = connect()
                token = conn.execute("SELECT seckill_lock_fair(%s, '5 s')", (name,)).fetchone()[0]
                if token is None:
                    continue
                t_from = conn.execute(clock).fetchone()[0]
                time.sleep(random.uniform(0.005, 0.03))
                t_to = conn.execute(clock).fetchone()[0]
                kept = conn.execute("SELECT seckill_unlock(%s)", (name,)).fetchone()[0]
                log.write("H", number, token, t_from, t_to, "t" if kept else "f")
            except psycopg.Error as err:
                if t_from is not None:
                    log.write("H", number, token, t_from, t_to, None)
                log.write("E", number, now_ms(), err.sqlstate or "conn", err)
                time.sleep(0.1)
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=holder, args=(i,)) for i in range(int(holders))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def alone(log_path):
    holds = []
    with open(log_path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if fields[0] == "H":
                holds.append((int(fields[3]), None if fields[4] == "\\N" else int(fields[4]),
                              int(fields[2]), fields[5]))
    ended = sorted(h for h in holds if h[1] is not None)
    unlocked_false = sum(1 for h in holds if h[3] == "f")
    # in the order of their grants: a hold that begins before an earlier one ended overlaps it
    overlaps = older = 0
    end = token = 0
    for t_from, t_to, tok, _ in ended:
        overlaps += t_from < end
        older += tok < token
        end, token = max(end, t_to), max(token, tok)
    print(f"holds {len(holds)} ended {len(ended)} unlocked_false {unlocked_false} overlaps {overlaps} older_tokens {older}")


def resolve(log_path, out_path):
    asked = []
    seen = set()
    with open(log_path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            if fields[0] == "A" and fields[6] == "error" and unknown_fate(fields[8]):
                key = (fields[4], fields[5])
                if key not in seen:
                    seen.add(key)
                    asked.append(key)
    conn = connect()
    with open(out_path, "w") as out:
        for user, goods in asked:
            if conn.closed or conn.broken:
                conn = connect()
            status = order_id = sqlstate = None
            try:
                status, order_id = conn.execute(
                    "SELECT status, order_id FROM seckill_order(%s, %s)", (user, goods)).fetchone()
            except psycopg.Error as err:
                status, sqlstate = "error", err.sqlstate or "conn"
            held = conn.execute(
                "SELECT o.status, o.id FROM seckill.orders o JOIN seckill.campaigns c ON c.id = o.campaign_id"
                " WHERE c.goods = %s AND c.state <> 'closed' AND o.user_id = %s"
                " ORDER BY o.status <> 'cancelled' DESC, o.id DESC LIMIT 1", (goods, user)).fetchone()
            out.write("\t".join(field(f) for f in (user, goods, status, order_id, sqlstate,
                                                    held[0] if held else "none", held[1] if held else None)) + "\n")
    conn.close()


def slots(sessions, goods, out_path):
    """Each of the sessions asks seckill_order() (a request the worker
    serves) once; then, with the worker frozen (SIGSTOP), twice with a
    request timeout of 300 ms: the first request is given up on and keeps
    one of the backend's two slots, so the second finds the other free and
    times out (SK001) unless that one was lost (SK002 "... before it was
    made"); then, the worker thawed, once more."""
    sessions = int(sessions)
    conns = [connect() for _ in range(sessions)]
    lines = []
    lock = threading.Lock()
    calls = 0

    def ask(phase, timeout, times):
        def probe(i):
            nonlocal calls
            conns[i].execute("SELECT set_config('seckill.request_timeout', %s, false)", (timeout,))
            for k in range(times):
                try:
                    conns[i].execute("SELECT status FROM seckill_order(%s, %s)",
                                     (f"slot-probe-{i}-{phase}-{k}", goods)).fetchone()
                    answer = "answered"
                except psycopg.Error as err:
                    answer = f"{err.sqlstate or 'conn'} {field(err)}"
                with lock:
                    calls += 1
                    lines.append(f"{phase} {answer}")

        threads = [threading.Thread(target=probe, args=(i,)) for i in range(sessions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    ask("live", "2s", 1)
    pid = conns[0].execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'seckill worker'").fetchone()[0]
    os.kill(pid, signal.SIGSTOP)
    try:
        ask("frozen", "300ms", 2)
    finally:
        os.kill(pid, signal.SIGCONT)
    ask("thawed", "2s", 1)
    for conn in conns:
        conn.close()
    with open(out_path, "w") as out:
        for line in lines:
            out.write(line + "\n")
        out.write(f"calls {calls}\n")


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "run":
        run(*args[:6], args[6:])
    elif mode == "resolve":
        resolve(*args)
    elif mode == "slots":
        slots(*args)
    elif mode == "locks":
        locks(*args)
    elif mode == "alone":
        alone(*args)
    else:
        sys.exit(f"unknown mode {mode}")
