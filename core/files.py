"""Durable, private files: the one module every package that writes files uses.

The journal (``core/journal``), the artifact store, the work lease and the
work steps all need the same moves, so each lives here once:

- :func:`write_atomic` — a crash leaves the old file or the new one, never a
  mix: write a temporary file in the same directory (``O_EXCL``,
  ``O_NOFOLLOW``), give it its final mode, write every byte, fsync it,
  rename it over the target, fsync the directory (a rename is durable only
  once its directory is). A failed write removes the temporary file. The
  target is a path, or a name inside a directory given by an open
  descriptor (``dir_fd=``, which may be an ``O_PATH`` descriptor).
- :func:`ensure_private_dir` — the one policy for directories we own:
  create missing ones 0700 (exactly, whatever the umask) and make each new
  entry durable in its parent; an existing directory must be a real
  directory (not a symlink), owned by the current user, and not accessible
  to group or others. A loose mode is refused with a ``chmod 700`` hint,
  never silently tightened: someone else may already have planted files.
- :func:`open_private` — open a file without following a symlink, creating
  it 0600 if asked; an existing file must be a regular file we own, not
  accessible to group or others.
- :func:`flock` (a context manager) and :func:`try_flock` — kernel locks
  that die with their process (never a pid file).
- :func:`write_all` — ``os.write`` until every byte is written.
- :func:`fsync_dir` — make a directory's entries (new names, renames) durable.

An fsync error propagates and is never retried ("fsyncgate": the kernel may
have dropped the dirty pages already). Callers own the path rules (who may
name a file); these helpers refuse symlinks where they open and create.

A refusal raises what the caller's ``unsafe(path, reason)`` factory builds
(the journal raises ``JournalUnsafe``, the artifact store
``ArtifactStoreUnsafe``); by default :class:`~openfunctions.core.errors.UnsafePath`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from .errors import UnsafePath

FILE_MODE = 0o600
DIR_MODE = 0o700
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)

#: Builds the error raised for an unsafe path: ``unsafe(path, reason)``.
UnsafeFactory = Callable[[str, str], Exception]
#: Every temporary file :func:`write_atomic` creates starts with this (recovery may sweep them).
TEMP_PREFIX = ".tmp-"


def unsafe_path(path: str, why: str) -> Exception:
    """The default ``unsafe`` factory: :class:`UnsafePath` naming the path and the reason."""
    return UnsafePath(f"refusing path {path!r}: {why}", details={"path": path, "reason": why})


# -- writing -----------------------------------------------------------------


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``os.write`` until every byte is written (a write may be short)."""
    view = memoryview(data).cast("B")
    while view:
        n = os.write(fd, view)
        view = view[n:]


def fsync_dir(directory: int | str | os.PathLike[str]) -> None:
    """fsync a directory (a path, or an open descriptor, ``O_PATH`` included), so
    the names created or renamed in it survive a crash."""
    if isinstance(directory, int):
        fd = os.open(".", os.O_RDONLY | _O_CLOEXEC | _O_DIRECTORY, dir_fd=directory)
    else:
        fd = os.open(directory, os.O_RDONLY | _O_CLOEXEC | _O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | bytearray | memoryview,
    *,
    mode: int | None = FILE_MODE,
    durable: bool = True,
    dir_fd: int | None = None,
) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring).

    ``mode`` is the file's final mode, exact whatever the umask (e.g. 0400
    for an immutable record); ``None`` keeps an existing file's mode and
    gives a new file ``0666 & ~umask`` (for a user's own files).
    ``dir_fd`` names the directory by an open descriptor; ``path`` is then a
    bare file name inside it. ``durable=False`` skips both fsyncs: only for
    files a reader can rebuild and checks on read (after a machine crash
    such a file may be missing or empty, never a torn mix of two contents).
    """
    path = os.fspath(path)
    if dir_fd is None:
        directory, name = os.path.split(path)
        directory = directory or "."
    else:
        if os.sep in path or path in ("", ".", ".."):
            raise ValueError(f"with dir_fd, write_atomic takes a bare file name, got {path!r}")
        directory, name = "", path
    at = {} if dir_fd is None else {"dir_fd": dir_fd}
    if mode is None:
        with contextlib.suppress(FileNotFoundError):
            mode = stat.S_IMODE(os.stat(path, follow_symlinks=False, **at).st_mode)
    tmp_name = f"{TEMP_PREFIX}{name}-{os.getpid()}-{os.urandom(4).hex()}"
    tmp = tmp_name if dir_fd is not None else os.path.join(directory, tmp_name)
    create_mode = 0o666 if mode is None else FILE_MODE
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, create_mode, **at)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, mode)  # exact, whatever the umask took from the create mode
            write_all(fd, data)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if dir_fd is None:
            os.rename(tmp, path)
        else:
            os.rename(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, **at)
        raise
    if durable:
        fsync_dir(directory if dir_fd is None else dir_fd)


# -- private directories and files ---------------------------------------------


def check_private(st: os.stat_result, path: str | os.PathLike[str], *, want_dir: bool, unsafe: UnsafeFactory = unsafe_path) -> None:
    """Refuse a symlink, the wrong kind, a foreign owner or a group/other mode (``st`` from lstat/fstat)."""
    p = os.fspath(path)
    if stat.S_ISLNK(st.st_mode):
        raise unsafe(p, "it is a symlink")
    if want_dir and not stat.S_ISDIR(st.st_mode):
        raise unsafe(p, "it is not a directory")
    if not want_dir and not stat.S_ISREG(st.st_mode):
        raise unsafe(p, "it is not a regular file")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise unsafe(p, f"it is owned by uid {st.st_uid}, not by the current user (uid {os.getuid()})")
    if st.st_mode & 0o077:
        want = "0700" if want_dir else "0600"
        raise unsafe(
            p,
            f"its mode is {stat.S_IMODE(st.st_mode):04o}; it must not be accessible to group or others "
            f"({want}: chmod {want[1:]} it)",
        )


def ensure_private_dir(path: str | os.PathLike[str], *, unsafe: UnsafeFactory = unsafe_path) -> None:
    """Create ``path`` (and missing parents) 0700, fsyncing each new entry's parent; check the final one.

    Only the final directory is checked for privacy; parents we did not
    create (``/tmp``, a home directory) are the user's business, but each
    must be a directory.
    """
    path = Path(path)
    missing: list[Path] = []
    p = path
    while True:
        try:
            os.lstat(p)  # exists (as anything): stop climbing
        except NotADirectoryError:
            raise unsafe(str(path), "a parent is not a directory") from None
        except FileNotFoundError:
            missing.append(p)
            if p.parent == p:
                break
            p = p.parent
            continue
        if p != path and not stat.S_ISDIR(os.stat(p).st_mode):
            raise unsafe(str(p), "a parent is not a directory")
        break
    for d in reversed(missing):
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            continue
        os.chmod(d, DIR_MODE)  # mkdir's mode passes through the umask
        fsync_dir(d.parent)
    check_private(os.lstat(path), path, want_dir=True, unsafe=unsafe)


def open_private(
    path: str | os.PathLike[str], flags: int, *, create: bool = False, unsafe: UnsafeFactory = unsafe_path
) -> int:
    """Open ``path`` with ``O_NOFOLLOW`` and check the file is private; return the descriptor.

    ``create=True`` creates a missing file 0600 (not fsynced: make it
    durable with :func:`fsync_dir` if its name matters; a durable new file is
    better made with :func:`write_atomic`). ``os.O_EXCL`` in ``flags`` with
    ``create`` refuses an existing file (``FileExistsError``).
    """
    try:
        if create:
            try:
                return os.open(path, flags | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, FILE_MODE)
            except FileExistsError:
                if flags & os.O_EXCL:
                    raise
        fd = os.open(path, flags & ~os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise unsafe(os.fspath(path), "it is a symlink") from None
        raise
    try:
        check_private(os.fstat(fd), path, want_dir=False, unsafe=unsafe)
    except BaseException:
        os.close(fd)
        raise
    return fd


# -- kernel locks ----------------------------------------------------------------

_HELD = (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


def try_flock(fd: int, *, shared: bool = False) -> bool:
    """Take a ``flock`` on ``fd`` without waiting: ``True`` if taken, ``False`` if another
    open file description holds a conflicting one. The lock lives until ``fd``
    (every duplicate of it) is closed, or its process dies, even by SIGKILL."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in _HELD:
            return False
        raise
    return True


@contextlib.contextmanager
def flock(
    target: int | str | os.PathLike[str], *, shared: bool = False, blocking: bool = True, create: bool = True
) -> Iterator[int]:
    """Hold a ``flock`` for the ``with`` body; yields the locked descriptor.

    ``target`` is an open descriptor (unlocked again on exit, left open) or
    a path, opened with ``O_NOFOLLOW`` (created 0600 when ``create``) and
    closed on exit, which drops the lock. ``blocking=False`` raises
    :class:`BlockingIOError` at once if another holder has it. The lock
    excludes other open file descriptions (other processes, other opens),
    not threads sharing one descriptor: pair it with a thread lock for that.
    """
    owned = not isinstance(target, int)
    if isinstance(target, int):
        fd = target
    else:
        flags = os.O_RDWR | os.O_CREAT if create else os.O_RDONLY
        fd = os.open(target, flags | _O_NOFOLLOW | _O_CLOEXEC, FILE_MODE)
    try:
        if blocking:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        elif not try_flock(fd, shared=shared):
            raise BlockingIOError(errno.EWOULDBLOCK, f"{target!r} is locked by another holder")
        try:
            yield fd
        finally:
            if not owned:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        if owned:
            os.close(fd)


# -- the data directory ------------------------------------------------------------


def default_data_dir() -> os.PathLike[str]:
    """The per-user data dir every command defaults to (``$OPENFUNCTIONS_MCP_DATA_DIR`` overrides it)."""
    env = os.environ.get("OPENFUNCTIONS_MCP_DATA_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("openfunctions-mcp", appauthor=False))


__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "TEMP_PREFIX",
    "UnsafeFactory",
    "check_private",
    "default_data_dir",
    "ensure_private_dir",
    "flock",
    "fsync_dir",
    "open_private",
    "try_flock",
    "unsafe_path",
    "write_all",
    "write_atomic",
]
