"""The journal's file rules: :mod:`openfunctions.core.files` with :class:`JournalUnsafe` as the refusal.

- Directories we create are 0700, files 0600, owned by the current user
  (``core.files.ensure_private_dir`` / ``open_private``: the one policy).
- Every open uses ``O_NOFOLLOW``; a symlink anywhere we open is refused, as is
  a group/other-accessible mode or a foreign owner (:class:`JournalUnsafe`).
- A new journal file is created with ``core.files.write_atomic`` (temporary
  name, fsync, rename, directory fsync).

:class:`FileOps` is the narrow seam the log writes through (``write_all``,
``sync`` and ``reserve``); tests swap in a fault-injecting subclass in the style of SQLite's
crash VFS. Nothing else in the package writes journal bytes.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .. import files
from ..errors import JournalUnsafe


def journal_unsafe(path: str, why: str) -> JournalUnsafe:
    return JournalUnsafe(f"refusing journal path {path!r}: {why}", details={"path": path, "reason": why})


def ensure_private_dir(path: Path) -> None:
    files.ensure_private_dir(path, unsafe=journal_unsafe)


def open_private(path: Path, flags: int, *, create: bool = False) -> int:
    return files.open_private(path, flags, create=create, unsafe=journal_unsafe)


def refuse_symlink(path: Path) -> None:
    """Refuse a journal path that exists as anything but a regular file (a missing one is fine)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise journal_unsafe(str(path), "it is a symlink")
    if not stat.S_ISREG(st.st_mode):
        raise journal_unsafe(str(path), "it is not a regular file")


class FileOps:
    """The two operations that make bytes durable; the seam for fault injection."""

    def write_all(self, fd: int, data: bytes) -> None:
        files.write_all(fd, data)

    def reserve(self, fd: int, offset: int, length: int) -> None:
        """Allocate ``length`` bytes of the file from ``offset`` (they read as NUL; the size grows to cover them).

        Raises OSError where the platform or file system cannot (the writer then appends instead)."""
        fallocate = getattr(os, "posix_fallocate", None)
        if fallocate is None:  # macOS
            raise OSError(errno.EOPNOTSUPP, "posix_fallocate is not available on this platform")
        fallocate(fd, offset, length)

    def sync(self, fd: int) -> None:
        # fdatasync is enough for an append: the size change is metadata
        # fdatasync must flush. macOS has no fdatasync; fsync there.
        (getattr(os, "fdatasync", None) or os.fsync)(fd)


__all__ = ["FileOps", "ensure_private_dir", "journal_unsafe", "open_private", "refuse_symlink"]
