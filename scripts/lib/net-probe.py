#!/usr/bin/env python3
"""Raw TCP measurements between two emulated hosts (no MPI in between), for
scripts/cluster-emulate.sh: the round trip of a 1-byte message and the bandwidth of a bulk
transfer. Standard library only.

    net-probe.py serve PORT                 # in one host: answers one client, then exits
    net-probe.py rtt HOST PORT [N]          # median round trip of N 1-byte ping-pongs, in us
                                            # (both ends poll, as MPI does)
    net-probe.py bw HOST PORT [MB]          # MB megabytes one way, the receiver acks the end

Each client prints one JSON line. The server exits after one connection (or after 60 s with
no client), so nothing is left running.
"""

import json
import socket
import statistics
import sys
import time

CHUNK = 1 << 20


def serve(port: int) -> None:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(1)
    srv.settimeout(60)
    conn, _ = srv.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    mode = conn.recv(1)
    if mode == b"r":
        # Echo single bytes until the client closes, polling (as MPI does) rather than
        # sleeping in recv: a sleeping process adds the scheduler's wake-up time.
        conn.setblocking(False)
        while True:
            try:
                b = conn.recv(1)
            except BlockingIOError:
                continue
            if not b:
                break
            conn.sendall(b)
    elif mode == b"b":
        total = int.from_bytes(conn.recv(8, socket.MSG_WAITALL), "little")
        got = 0
        buf = bytearray(CHUNK)
        while got < total:
            n = conn.recv_into(buf)
            if n == 0:
                break
            got += n
        conn.sendall(b"k")
    conn.close()
    srv.close()


def connect(host: str, port: int) -> socket.socket:
    # The server may still be starting: retry for up to 10 s.
    deadline = time.time() + 10
    while True:
        try:
            s = socket.create_connection((host, port), timeout=30)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return s
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)


def rtt(host: str, port: int, n: int) -> None:
    s = connect(host, port)
    s.sendall(b"r")
    s.setblocking(False)
    times = []
    for i in range(n + n // 10):
        t0 = time.perf_counter()
        s.sendall(b"x")
        while True:
            try:
                if s.recv(1):
                    break
            except BlockingIOError:
                pass
        if i >= n // 10:  # the first tenth warms up
            times.append(time.perf_counter() - t0)
    s.close()
    print(json.dumps({"rtt_us_median": statistics.median(times) * 1e6,
                      "rtt_us_min": min(times) * 1e6, "round_trips": n}))


def bw(host: str, port: int, mb: int) -> None:
    s = connect(host, port)
    total = mb * 1_000_000
    s.sendall(b"b" + total.to_bytes(8, "little"))
    buf = bytes(CHUNK)
    t0 = time.perf_counter()
    sent = 0
    while sent < total:
        n = min(CHUNK, total - sent)
        s.sendall(buf[:n])
        sent += n
    s.recv(1)
    dt = time.perf_counter() - t0
    s.close()
    print(json.dumps({"bytes": total, "seconds": dt, "gbit_per_s": total * 8 / dt / 1e9}))


def main() -> None:
    a = sys.argv[1:]
    if len(a) >= 2 and a[0] == "serve":
        serve(int(a[1]))
    elif len(a) >= 3 and a[0] == "rtt":
        rtt(a[1], int(a[2]), int(a[3]) if len(a) > 3 else 2000)
    elif len(a) >= 3 and a[0] == "bw":
        bw(a[1], int(a[2]), int(a[3]) if len(a) > 3 else 100)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
