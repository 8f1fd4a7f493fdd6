"""Ownership: one writer process per journal, by ``flock`` on ``<path>.lock``.

The kernel drops the lock when its holder dies (even by SIGKILL), so a
crashed writer never needs manual cleanup. The holder writes its pid into
the lock file only so that a refused opener can name it: the pid is a
message, never the lock. The lock is per open file description, so a second
open in the same process is refused too.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import JournalLocked
from ..files import try_flock
from ._fsutil import open_private


def lock_path(path: Path) -> Path:
    return Path(f"{path}.lock")


def _recorded_pid(fd: int) -> int | None:
    try:
        raw = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
        return int(raw.split()[0]) if raw else None
    except (OSError, ValueError, IndexError):
        return None


def kernel_holders(lock_file: Path) -> list[int]:
    """Pids holding a flock on ``lock_file`` per ``/proc/locks`` (Linux; ``[]`` elsewhere)."""
    try:
        st = os.stat(lock_file, follow_symlinks=False)
        with open("/proc/locks") as f:
            lines = f.readlines()
    except OSError:
        return []
    want = f":{st.st_ino}"
    out = []
    for ln in lines:
        parts = ln.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5].endswith(want):
            try:
                out.append(int(parts[4]))
            except ValueError:
                pass
    return out


class JournalLock:
    """An exclusive, non-blocking flock held for the life of a writer."""

    def __init__(self, path: Path) -> None:
        self.path = lock_path(path)
        self.journal = path
        self.fd: int | None = None

    def acquire(self) -> None:
        # Not fsynced: the lock lives in the kernel and the pid is only a message.
        fd = open_private(self.path, os.O_RDWR, create=True)
        try:
            taken = try_flock(fd)
        except BaseException:
            os.close(fd)
            raise
        if not taken:
            pid = _recorded_pid(fd)
            os.close(fd)
            who = f"process {pid}" if pid else "another process"
            if pid == os.getpid():
                who = "this process (another open JournalLog)"
            raise JournalLocked(
                f"journal {str(self.journal)!r} is locked by {who}; one writer per journal",
                details={"path": str(self.journal), "pid": pid},
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            # Closing drops the flock; the stale pid left behind is harmless.
            os.close(fd)


__all__ = ["JournalLock", "kernel_holders", "lock_path"]
