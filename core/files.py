"""Durable-file primitives shared by every package that writes files.

The journal (``core/journal/_fsutil.py``), the artifact store
(``artifacts/_fs.py``) and the work lease all need the same two moves, so
they live here once:

- :func:`write_atomic` — a crash leaves the old file or the new one, never a
  mix: write a temporary file in the same directory (``O_EXCL``,
  ``O_NOFOLLOW``, created 0600), fsync it, set its final mode, rename it over
  the target, fsync the directory (a rename is durable only once its
  directory is). A failed write removes the temporary file.
- :func:`fsync_dir` — make a directory's entries (new names, renames) durable.

An fsync error propagates and is never retried ("fsyncgate": the kernel may
have dropped the dirty pages already). Callers own the path rules (who may
name a file, what counts as unsafe); these helpers only refuse to follow a
symlink at the temporary name.
"""

from __future__ import annotations

import os

FILE_MODE = 0o600
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory, so the names created or renamed in it survive a crash."""
    fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte is written (a write may be short)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def write_atomic(path: str | os.PathLike[str], data: bytes, *, mode: int = FILE_MODE, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring).

    ``mode`` is the file's final mode (e.g. 0400 for an immutable record).
    ``durable=False`` skips both fsyncs: only for files a reader can rebuild
    and checks on read (after a machine crash such a file may be missing or
    empty, never a torn mix of two contents).
    """
    path = os.fspath(path)
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".tmp-{name}-{os.getpid()}-{os.urandom(4).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, FILE_MODE)
    try:
        try:
            write_all(fd, data)
            if durable:
                os.fsync(fd)
            os.fchmod(fd, mode)  # exact, whatever the umask took from the create mode
        finally:
            os.close(fd)
        os.rename(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(directory or ".")


def default_data_dir() -> "os.PathLike[str]":
    """The per-user data dir every command defaults to (``$OPENFUNCTIONS_MCP_DATA_DIR`` overrides it)."""
    from pathlib import Path

    env = os.environ.get("OPENFUNCTIONS_MCP_DATA_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("openfunctions-mcp", appauthor=False))


__all__ = ["FILE_MODE", "default_data_dir", "fsync_dir", "write_all", "write_atomic"]
