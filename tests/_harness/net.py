"""Free loopback ports, and waiting for a server subprocess to listen on one.

The one copy shared by the tests and the bench scripts (tests/_net.py re-exports it).

Ports across pytest-xdist workers: ``free_port`` asks the kernel for a port (``bind(0)``), then closes it
and hands it to a server that binds it a moment later; in that gap any other process's ``bind(0)`` may be
given the same port. Within one process a set of handed-out ports rules that out; across the workers of
one run, each worker takes only the ports ``p`` with ``p // 2 % PYTEST_XDIST_WORKER_COUNT`` equal to its
own index (``gw<index>`` in ``PYTEST_XDIST_WORKER``), so two workers (and the servers they start) never get
the same port, with no file or lock shared between them. ``p // 2``, not ``p``: Linux gives ``bind(0)``
odd ports and ``connect`` even ones (so that servers and clients do not compete), so ``p % 2`` would leave
worker 0 nothing. Child processes inherit their worker's variables
and so its residue class (a bench script a test runs picks from its parent worker's ports, while that
test waits for it). Outside xdist every port qualifies.
"""

from __future__ import annotations

import os
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


def worker_slot() -> tuple[int, int]:
    """``(index, count)`` of this pytest-xdist worker (``(0, 1)`` outside xdist): ``free_port`` hands out
    here the ports ``p`` with ``p // 2 % count == index``."""
    count_text = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not count_text.isdigit() or int(count_text) < 2 or not worker.startswith("gw") or not worker[2:].isdigit():
        return 0, 1
    count = int(count_text)
    return int(worker[2:]) % count, count


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, never the same twice in one process nor
    in two workers of one pytest-xdist run (see the module docstring).

    A process outside this run may take it before the server binds it; callers
    that cannot afford a rare failure retry with a new port.
    """
    index, count = worker_slot()
    for _ in range(1000 * count):
        with socket.socket() as s:
            s.bind((LOOPBACK, 0))
            port = s.getsockname()[1]
        if port // 2 % count != index:
            continue
        with _handed_out_lock:
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError(f"no loopback port left in this worker's class ({index} mod {count}) not handed out already")


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
