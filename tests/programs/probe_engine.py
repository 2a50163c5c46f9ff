"""An "engine" that probes what an engine on this machine can reach, for the isolation tests.

Started by Berth's standalone backend like any engine; prints one line, `PROBE {json}`, with
each attempt's outcome ("denied" or what it got), then stays up until it is stopped, so that
another probe can try to reach it.

    probe_engine.py (--uds PATH | --host 127.0.0.1 --port N) --targets JSON

Given --uds (as Berth's backends give it), it listens there as an engine would.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path


def read(path: str) -> str:
    try:
        Path(path).read_bytes()
    except PermissionError:
        return "denied"
    except FileNotFoundError:
        return "missing"
    return "read"


def write(folder: str) -> str:
    try:
        (Path(folder) / "probe-was-here").write_text("x")
    except PermissionError:
        return "denied"
    return "written"


def listing(folder: str) -> str:
    try:
        os.listdir(folder)
    except PermissionError:
        return "denied"
    return "listed"


def postgres(port: int) -> str:
    """Log in as the superuser without a password, speaking PostgreSQL's start-up message."""
    user = b"user\0postgres\0database\0postgres\0\0"
    body = (196608).to_bytes(4, "big") + user
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall((len(body) + 4).to_bytes(4, "big") + body)
        kind = sock.recv(1)
        if kind == b"R":  # Authentication request: R then length then the method's code
            code = int.from_bytes(sock.recv(8)[4:8], "big")
            return "in without a password" if code == 0 else "asked for a password"
        return f"answered {kind!r}"


def connect(path: str) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(path)
        except PermissionError:
            return "denied"
        except OSError as error:
            return f"failed: {error.strerror}"
    return "connected"


def listen(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen()
    return sock


def redis(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"PING\r\n")
        answer = sock.recv(64)
    return "refused: " + answer.decode().strip() if answer.startswith(b"-") else "answered"


def main() -> None:
    targets = json.loads(sys.argv[sys.argv.index("--targets") + 1])
    own = sys.argv[sys.argv.index("--uds") + 1] if "--uds" in sys.argv else ""
    listening = listen(own) if own else None  # noqa: F841 - kept open while the probe lives
    found = {"uid": os.getuid(), "home": os.environ.get("HOME", ""), "socket": own}
    found["own_socket"] = connect(own) if own else "none"
    found["keys"] = read(targets["keys"])
    found["postgres"] = postgres(targets["postgres_port"])
    found["redis"] = redis(targets["redis_port"])
    found["models"] = write(targets["models"])
    found["own_home"] = write(os.environ["HOME"])
    for name, path in targets.get("read", {}).items():
        found[name] = read(path)
    for name, path in targets.get("write", {}).items():
        found[name] = write(path)
    for name, path in targets.get("list", {}).items():
        found[name] = listing(path)
    for name, path in targets.get("connect", {}).items():
        found[name] = connect(path)
    print("PROBE " + json.dumps(found), flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
