"""Prints N free TCP ports of 127.0.0.1 (default 1), one a line.

The ports are free when printed; the caller binds them right away.
"""
import socket
import sys

sockets = []
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    sockets.append(s)
for s in sockets:
    print(s.getsockname()[1])
