#!/usr/bin/python3
"""A fake Redis for test/t/86_garbage_replies.t that answers garbage.

    garbage_redis.py SEED PORT EXTRA_PORTS LOG [MODE_FILE]

Listens on PORT and on EXTRA_PORTS ports after it (masters that a CLUSTER
SLOTS reply may name).  It answers well enough for the worker to get past
the connection's handshake, and, drawn from SEED, replies that are wrong (one command of each connection, drawn at random):
of the wrong type, truncated, oversized, garbage bytes, and CLUSTER SLOTS
replies naming more masters than any client keeps, unreachable ones,
slots out of range and ranges that are no arrays.  Each reply it chose is
logged to LOG as "<connection> <command> <kind>".  While MODE_FILE names one
of the CLUSTER SLOTS kinds, every new connection answers CLUSTER SLOTS with
that kind and nothing else wrong.
"""
import hashlib
import random
import socket
import sys
import threading

seed, port, extra, log_path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
mode_path = sys.argv[5] if len(sys.argv) > 5 else None
SLOTS_KINDS = ["many-unreachable", "many-reachable", "out-of-range", "wrong-types", "nested"]


def mode():
    try:
        with open(mode_path) as m:
            kind = m.read().strip()
        return kind if kind in SLOTS_KINDS else None
    except (OSError, TypeError):
        return None
rng = random.Random(seed)
rng_lock = threading.Lock()
log = open(log_path, "a", buffering=1)
conn_ids = iter(range(1, 1 << 30))


def bulk(s):
    b = s if isinstance(s, bytes) else str(s).encode()
    return b"$%d\r\n%s\r\n" % (len(b), b)


def arr(items):
    return b"*%d\r\n" % len(items) + b"".join(items)


def integer(n):
    return b":%d\r\n" % n


def slots_reply(kind):
    """CLUSTER SLOTS, of one of several wrong shapes."""
    if kind == "many-unreachable":
        # 64 masters on ports nothing listens on
        return arr([arr([integer(i * 256), integer(i * 256 + 255),
                         arr([bulk("127.0.0.1"), integer(1 + i), bulk("id%d" % i)])]) for i in range(64)])
    if kind == "many-reachable":
        # a master on every port this server listens on, and more
        return arr([arr([integer(i * 300), integer(i * 300 + 299),
                         arr([bulk("127.0.0.1"), integer(port + 1 + i % (extra + 8)), bulk("id%d" % i)])])
                    for i in range(54)])
    if kind == "out-of-range":
        return arr([arr([integer(-5), integer(99999999), arr([bulk("127.0.0.1"), integer(port)])]),
                    arr([integer(20000), integer(-1), arr([bulk(""), integer(port)])])])
    if kind == "wrong-types":
        return arr([bulk("0"), integer(7), arr([]), arr([integer(0), integer(1), integer(2)]),
                    arr([integer(0), integer(16383), arr([integer(1)])])])
    if kind == "nested":
        deep = integer(1)
        for _ in range(200):
            deep = arr([deep])
        return arr([arr([integer(0), integer(16383), deep])])
    return b"-ERR garbage\r\n"


GARBAGE = ["wrong-type", "truncated", "oversized", "bytes", "nil", "huge-array", "error", "close"]


def garbage(kind):
    if kind == "wrong-type":
        return rng.choice([integer(rng.randint(-10, 10)), bulk("x" * rng.randint(0, 50)), arr([integer(1)] * 3),
                           b"+OK\r\n"])
    if kind == "truncated":
        return b"*3\r\n$5\r\nhel"
    if kind == "oversized":
        return bulk("y" * rng.choice([70000, 1 << 20]))
    if kind == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 40))) + b"\r\n"
    if kind == "nil":
        return rng.choice([b"$-1\r\n", b"*-1\r\n", b"*0\r\n"])
    if kind == "huge-array":
        return b"*100000\r\n:1\r\n"
    if kind == "error":
        return rng.choice([b"-MOVED 99999 127.0.0.1:1\r\n", b"-ASK -3 nohost\r\n", b"-MOVED 5 :\r\n",
                           b"-TRYAGAIN\r\n", b"-NOSCRIPT\r\n", b"-ERR\r\n"])
    return None


def read_command(f):
    """One RESP array of bulk strings, as hiredis sends commands."""
    line = f.readline()
    if not line:
        return None
    if not line.startswith(b"*"):
        return [line.strip()]
    args = []
    for _ in range(int(line[1:])):
        n = int(f.readline()[1:])
        args.append(f.read(n + 2)[:-2])
    return args


slots_deck = []


def next_slots_kind():
    """The kind of the next CLUSTER SLOTS answer, dealt from shuffled decks
    of every kind and "fine": any 20 answers in a row hold every kind."""
    with rng_lock:
        if not slots_deck:
            slots_deck.extend(SLOTS_KINDS + ["fine"])
            rng.shuffle(slots_deck)
        return slots_deck.pop()


def serve(sock):
    """Each connection answers one command, drawn at random, with garbage."""
    cid = next(conn_ids)
    f = sock.makefile("rb")
    with rng_lock:
        victim = rng.randint(0, 40)
    forced = mode()
    if forced is not None:
        victim = -1
    n = 0
    try:
        while True:
            cmd = read_command(f)
            if cmd is None:
                return
            name = b" ".join(cmd[:2]).upper() if cmd[0].upper() in (b"SCRIPT", b"CLUSTER") else cmd[0].upper()
            bad = n == victim
            n += 1
            with rng_lock:
                kind = rng.choice(GARBAGE) if bad else "fine"
            slots_kind = (forced or next_slots_kind()) if name == b"CLUSTER SLOTS" else "fine"
            if slots_kind != "fine":
                kind = slots_kind
                out = slots_reply(kind)
            elif bad:
                out = garbage(kind)
            elif name == b"AUTH" or name == b"SELECT":
                out = b"+OK\r\n"
            elif name == b"PING":
                out = b"+PONG\r\n"
            elif name == b"ROLE":
                out = arr([bulk("master"), integer(0), arr([])])
            elif name == b"INFO":
                out = bulk("# Server\r\nrun_id:%040d\r\n" % seed)
            elif name == b"SCRIPT LOAD":
                out = bulk(hashlib.sha1(cmd[2]).hexdigest())
            elif name == b"CLUSTER SLOTS":
                out = arr([arr([integer(0), integer(16383), arr([bulk("127.0.0.1"), integer(port)])])])
            elif name == b"CLUSTER NODES":
                out = bulk("x 127.0.0.1:%d@1 master - 0 0 1 connected 0-16383 [5->-y] -3-99999\n" % port)
            elif name == b"GET" or name == b"HGET":
                out = b"$-1\r\n"
            else:
                out = garbage(rng.choice(GARBAGE[:-1]))
            log.write("%d %s %s\n" % (cid, name.decode(errors="replace"), kind))
            if out is None:
                return
            sock.sendall(out)
    except (OSError, ValueError):
        return
    finally:
        sock.close()


def listen(p):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", p))
    s.listen(64)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()


for p in range(port + 1, port + 1 + extra):
    threading.Thread(target=listen, args=(p,), daemon=True).start()
listen(port)
