"""Small durable-file helpers: safe directories, atomic writes, directory fsync.

Every name passed here is produced by this package (hex digests, checked
artifact ids), never a caller string. An fsync error propagates and is not
retried ("fsyncgate": the kernel may already have dropped the dirty pages).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import stat
import sys

from openfunctions.core.files import fsync_dir
from openfunctions.core.files import write_atomic as _write_atomic

from .errors import ArtifactStoreUnsafe

DIR_MODE = 0o700
FILE_MODE = 0o600
FROZEN_MODE = 0o400
_OPEN_FLAGS = os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


def ensure_dir(path: str) -> None:
    """Create ``path`` (0700) or check an existing one: a real directory we own, tightened to 0700."""
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ArtifactStoreUnsafe(f"artifact store path {path!r} is not a plain directory (symlink or file)")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise ArtifactStoreUnsafe(f"artifact store directory {path!r} belongs to uid {st.st_uid}, not to this user")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, DIR_MODE)


def _load_sync_file_range():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a just-written range to disk (Linux; elsewhere a no-op).

    It does not wait and guarantees nothing: the final fsync still does.
    Started early, the device works while we keep copying and hashing, so
    that fsync has less left to wait for.
    """
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)


def write_atomic(directory: str, name: str, data: bytes, *, mode: int = FILE_MODE, durable: bool = True) -> None:
    """Write ``directory/name`` so that a crash leaves the old file or the new one, never a mix
    (:func:`openfunctions.core.files.write_atomic`; ``durable=False`` only for
    files a reader can rebuild and checks on read)."""
    _write_atomic(os.path.join(directory, name), data, mode=mode, durable=durable)


def read_small(path: str, limit: int) -> bytes:
    """Read a small file without following a symlink; raise ValueError past ``limit`` bytes."""
    fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
    try:
        data = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ValueError(f"{path} is larger than {limit} bytes")
    return data


def unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


__all__ = ["unlink_quiet", "ensure_dir", "fsync_dir", "start_writeback", "write_atomic", "read_small", "DIR_MODE", "FILE_MODE", "FROZEN_MODE"]
