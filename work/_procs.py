"""Liveness of a command step's processes, from what the attempt journal recorded.

A ``command`` step runs in its own session, so it outlives a server that is
SIGKILLed. Before anything concludes about such an operation (a readback, an
operator's resolution) the command must be gone, or the readback reads the
world before the orphan changes it. Two durable facts identify its processes:

- the ``spawned`` record: the process group id and the leader's start time
  (``start_ticks``, field 22 of ``/proc/<pid>/stat``) and the boot id, so a
  reused pid or a reboot is never taken for the command;
- the marker ``OPENFUNCTIONS_WORK_OPERATION=<operation id>`` in the command's
  environment, inherited by everything it starts (also a grandchild that left
  the group with ``setsid``), which covers the short window between the spawn
  and the ``spawned`` record.

Linux reads ``/proc``; elsewhere only the process group is probed
(``killpg(pgid, 0)``), which is weaker (a reused group id reads as alive:
the safe side).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from typing import Any

MARKER_ENV = "OPENFUNCTIONS_WORK_OPERATION"
_PROC = "/proc"


def boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, pgrp, start_ticks)`` of a live process, or None."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after the last ')'
    rest = raw[raw.rfind(")") + 2 :].split()
    try:
        return rest[0], int(rest[2]), int(rest[19])
    except (IndexError, ValueError):
        return None


def start_ticks(pid: int) -> int | None:
    st = _stat(pid)
    return st[2] if st else None


def _has_marker(pid: int, marker: bytes) -> bool:
    try:
        with open(f"{_PROC}/{pid}/environ", "rb") as f:
            return marker in f.read().split(b"\0")
    except OSError:
        return False


def live_processes(operation_id: str, process: Mapping[str, Any] | None) -> list[int]:
    """Pids of the operation's processes still running (zombies are dead)."""
    if process and process.get("boot_id") and process.get("boot_id") != boot_id():
        return []  # the machine rebooted since: nothing of it survives
    pgid = process.get("pgid") if process else None
    ticks = process.get("start_ticks") if process else None
    if not os.path.isdir(_PROC):
        if isinstance(pgid, int):
            try:
                os.killpg(pgid, 0)
                return [pgid]
            except ProcessLookupError:
                return []
            except PermissionError:
                return [pgid]
        return []
    marker = f"{MARKER_ENV}={operation_id}".encode()
    out: list[int] = []
    me = os.getpid()
    for name in os.listdir(_PROC):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me:
            continue
        st = _stat(pid)
        if st is None or st[0] in ("Z", "X"):
            continue
        in_group = isinstance(pgid, int) and st[1] == pgid and (not isinstance(ticks, int) or st[2] >= ticks)
        if in_group or _has_marker(pid, marker):
            out.append(pid)
    return sorted(out)


def kill_and_wait(operation_id: str, process: Mapping[str, Any] | None, *, timeout: float = 10.0) -> list[int]:
    """SIGKILL every live process of the operation and wait until none is left.

    Returns the pids that were killed; raises ``TimeoutError`` if some
    survive ``timeout`` seconds (e.g. another user's process, uninterruptible IO).
    """
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while True:
        alive = live_processes(operation_id, process)
        if not alive:
            return sorted(set(killed))
        if time.monotonic() > deadline:
            raise TimeoutError(f"processes {alive} of operation {operation_id} did not exit")
        pgid = process.get("pgid") if process else None
        if isinstance(pgid, int):
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


__all__ = ["MARKER_ENV", "boot_id", "kill_and_wait", "live_processes", "start_ticks"]
