"""Free loopback ports, and waiting for a server subprocess to listen on one.

The one copy shared by the tests and the bench scripts (tests/_net.py re-exports it).
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Callable

LOOPBACK = "127.0.0.1"


# Ports free_port has handed out in this process. The kernel may give a just-released port to the next
# bind(0): two servers started back to back then raced for one port, the loser exited 2 ("port taken")
# while wait_for_port, connecting to the winner, reported it listening (the reliability fuzzer's rare
# failures: one target's requests answered by another target's server).
_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, never the same twice in one process.

    Another process may take it before the server binds it; callers that
    cannot afford a rare failure retry with a new port.
    """
    for _ in range(1000):
        with socket.socket() as s:
            s.bind((LOOPBACK, 0))
            port = s.getsockname()[1]
        with _handed_out_lock:
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError("no loopback port left that this process has not handed out already")


def wait_for_port(
    port: int, proc: subprocess.Popen, timeout: float = 30.0, *, output: Callable[[], str] | None = None
) -> None:
    """Return once 127.0.0.1:``port`` accepts a connection.

    Raises ``RuntimeError`` if ``proc`` exits first and ``TimeoutError`` after
    ``timeout`` seconds; both messages end with ``output()`` (default: what the
    exited process wrote to its stderr pipe, if it has one).
    """

    def said() -> str:
        if output is not None:
            return output()[-3000:]
        if proc.poll() is not None and proc.stderr is not None:
            text = proc.stderr.read()
            return (text.decode(errors="replace") if isinstance(text, bytes) else text)[-3000:]
        return ""

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on port {port}: {said()}")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"server did not listen on {LOOPBACK}:{port} within {timeout:.0f} s: {said()}")


def read_until_closed(s: socket.socket) -> bytes:
    """Everything the peer sends until it closes the connection (a reset counts as closed)."""
    out = bytearray()
    while True:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        out += chunk
    return bytes(out)
