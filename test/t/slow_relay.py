"""A TCP relay that forwards at most RATE bytes a second each way, so that
a standby behind it stays in catch-up while its primary has a backlog.
Usage: python3 slow_relay.py listen_port target_port rate_bytes_per_s
"""
import socket
import sys
import threading
import time

listen_port, target_port, rate = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])


def pump(src, dst):
    chunk = max(1, rate // 20)
    try:
        while True:
            data = src.recv(chunk)
            if not data:
                break
            dst.sendall(data)
            time.sleep(len(data) / rate)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", listen_port))
server.listen(8)
while True:
    client, _ = server.accept()
    upstream = socket.create_connection(("127.0.0.1", target_port))
    for a, b in ((client, upstream), (upstream, client)):
        threading.Thread(target=pump, args=(a, b), daemon=True).start()
