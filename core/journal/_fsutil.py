"""Private, fsynced files: the file-system rules every journal file follows.

- Directories we create are 0700, files 0600, owned by the current user.
- Every open uses ``O_NOFOLLOW``; a symlink anywhere we open is refused, as is
  a group/other-accessible mode or a foreign owner (:class:`JournalUnsafe`).
- A new file or a rename is durable only after its directory is fsynced, so
  :func:`openfunctions.core.files.write_atomic` writes to a temporary name, fsyncs the file,
  renames, and fsyncs the directory.

:class:`FileOps` is the narrow seam the log writes through (``write_all`` and
``sync``); tests swap in a fault-injecting subclass in the style of SQLite's
crash VFS. Nothing else in the package writes journal bytes.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..errors import JournalUnsafe
from ..files import fsync_dir, write_all

DIR_MODE = 0o700
FILE_MODE = 0o600
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _unsafe(path: Path | str, why: str) -> JournalUnsafe:
    return JournalUnsafe(f"refusing journal path {str(path)!r}: {why}", details={"path": str(path), "reason": why})


def check_private(st: os.stat_result, path: Path | str, *, want_dir: bool) -> None:
    """Refuse a symlink, the wrong kind, a foreign owner or a group/other mode."""
    if stat.S_ISLNK(st.st_mode):
        raise _unsafe(path, "it is a symlink")
    if want_dir and not stat.S_ISDIR(st.st_mode):
        raise _unsafe(path, "it is not a directory")
    if not want_dir and not stat.S_ISREG(st.st_mode):
        raise _unsafe(path, "it is not a regular file")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise _unsafe(path, f"it is owned by uid {st.st_uid}, not by the current user (uid {os.getuid()})")
    if st.st_mode & 0o077:
        want = "0700" if want_dir else "0600"
        raise _unsafe(path, f"its mode is {stat.S_IMODE(st.st_mode):04o}; it must not be accessible to group or others ({want})")


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and missing parents) 0700, fsyncing each new entry's parent.

    Only the final directory is checked for privacy; parents we did not
    create (``/tmp``, a home directory) are the user's business.
    """
    missing: list[Path] = []
    p = path
    while True:
        try:
            os.lstat(p)  # exists (as anything): stop climbing
        except FileNotFoundError:
            missing.append(p)
            if p.parent == p:
                break
            p = p.parent
            continue
        if p != path and not stat.S_ISDIR(os.stat(p).st_mode):
            raise _unsafe(p, "a parent is not a directory")
        break
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(d, DIR_MODE)  # mkdir's mode passes through the umask
        fsync_dir(d.parent)
    check_private(os.lstat(path), path, want_dir=True)


def open_private(path: Path, flags: int) -> int:
    """Open an existing file with ``O_NOFOLLOW`` and check it is private."""
    try:
        fd = os.open(path, flags | _O_NOFOLLOW | _O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _unsafe(path, "it is a symlink") from None
        raise
    try:
        check_private(os.fstat(fd), path, want_dir=False)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_or_create_private(path: Path, flags: int) -> int:
    """Open ``path``, creating it 0600 if absent.

    Not fsynced: its one caller is the lock file, whose lock lives in the
    kernel and whose pid is only a message; the journal file itself is
    created with :func:`openfunctions.core.files.write_atomic`.
    """
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return open_private(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _unsafe(path, "it is a symlink") from None
        raise
    return fd


def refuse_symlink(path: Path) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _unsafe(path, "it is a symlink")
    if not stat.S_ISREG(st.st_mode):
        raise _unsafe(path, "it is not a regular file")


class FileOps:
    """The two operations that make bytes durable; the seam for fault injection."""

    def write_all(self, fd: int, data: bytes) -> None:
        write_all(fd, data)

    def sync(self, fd: int) -> None:
        # fdatasync is enough for an append: the size change is metadata
        # fdatasync must flush. macOS has no fdatasync; fsync there.
        (getattr(os, "fdatasync", None) or os.fsync)(fd)


__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "FileOps",
    "check_private",
    "ensure_private_dir",
    "fsync_dir",
    "open_or_create_private",
    "open_private",
    "refuse_symlink",
]
