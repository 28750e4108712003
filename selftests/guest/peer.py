#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""A barrier between the two guests of the two-guest phase, over their only link.

usage: peer.py ROLE TAG [VALUE] [--timeout SECONDS]
       peer.py ROLE --serve

ROLE is "a" (listens on 198.18.0.1) or "b" (connects to it, retrying until A listens). Both
sides send "TAG<TAB>VALUE" and read the other's line; the call returns once both have arrived
at the same TAG and prints the peer's VALUE. A different TAG (the guests out of step), a lost
connection or no peer within the timeout exits non-zero, so a hung or crashed peer fails the
run instead of stalling it.

With --serve it stays, so that a barrier costs no interpreter start (about a second in a
guest under TCG, and a two-guest case passes three barriers): it reads requests
"TIMEOUT TAG<TAB>VALUE", one per line, and answers each with one line, "0 PEER_VALUE" or
"1 WHY", until its input ends.
"""
import socket
import sys
import time

ADDR_A = "198.18.0.1"
PORT = 7470


def line_of(conn, deadline):
    """Reads one line (without its newline) before the deadline."""
    data = b""
    while not data.endswith(b"\n"):
        conn.settimeout(max(0.1, deadline - time.monotonic()))
        chunk = conn.recv(4096)
        if not chunk:
            raise ConnectionResetError("peer closed the connection")
        data += chunk
    return data[:-1].decode(errors="replace")


def exchange(conn, mine, deadline):
    conn.sendall(mine.encode() + b"\n")
    return line_of(conn, deadline)


def side_a(mine, deadline):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((ADDR_A, PORT))
    srv.listen(1)
    srv.settimeout(max(0.1, deadline - time.monotonic()))
    conn, _ = srv.accept()
    # One connection per barrier: B's next barrier must not queue on this listener.
    srv.close()
    with conn:
        return exchange(conn, mine, deadline)


def side_b(mine, deadline):
    while True:
        try:
            with socket.create_connection((ADDR_A, PORT), timeout=2) as conn:
                return exchange(conn, mine, deadline)
        except OSError:
            # Refused, unreachable, or reset by a listener A closed: A is not there yet.
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def barrier(role, tag, value, timeout):
    """One barrier; returns the peer's value or raises RuntimeError saying why not."""
    deadline = time.monotonic() + timeout
    try:
        theirs = (side_a if role == "a" else side_b)(f"{tag}\t{value}", deadline)
    except OSError as e:
        raise RuntimeError(f"peer.py: no peer at barrier '{tag}' within {timeout:.0f} s: {e}")
    ttag, _, tvalue = theirs.partition("\t")
    if ttag != tag:
        raise RuntimeError(f"peer.py: out of step: here '{tag}', peer '{ttag}'")
    return tvalue


def serve(role):
    for line in sys.stdin:
        timeout, _, rest = line.rstrip("\n").partition(" ")
        tag, _, value = rest.partition("\t")
        try:
            print("0 " + barrier(role, tag, value, float(timeout)), flush=True)
        except (RuntimeError, ValueError) as e:
            print(f"1 {e}", flush=True)


def main():
    args = sys.argv[1:]
    timeout = 240.0
    if "--timeout" in args:
        i = args.index("--timeout")
        timeout = float(args[i + 1])
        del args[i : i + 2]
    if args[1:] == ["--serve"] and args[0] in ("a", "b"):
        serve(args[0])
        return
    if len(args) not in (2, 3) or args[0] not in ("a", "b"):
        sys.exit(__doc__)
    try:
        print(barrier(args[0], args[1], args[2] if len(args) == 3 else "", timeout))
    except RuntimeError as e:
        sys.exit(str(e))


if __name__ == "__main__":
    main()
