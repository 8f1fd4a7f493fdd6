"""The artifact store's file helpers on top of :mod:`openfunctions.core.files`.

Atomic writes, private directories, kernel locks and directory fsync come
from ``core.files`` (one policy for every package); this module adds what
only the store needs: the store's own refusal error, early writeback for
large blobs, a bounded read of small records. Every name passed here is
produced by this package (hex digests, checked artifact ids), never a
caller string.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from collections.abc import Callable

from openfunctions.core.files import ensure_private_dir

from .errors import ArtifactStoreUnsafe

FROZEN_MODE = 0o400
_OPEN_FLAGS = os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)


def store_unsafe(path: str, why: str) -> ArtifactStoreUnsafe:
    return ArtifactStoreUnsafe(f"artifact store path {path!r} is unsafe: {why}", details={"path": path, "reason": why})


def ensure_dir(path: str) -> None:
    """Create ``path`` 0700 or check an existing one (``core.files.ensure_private_dir``'s policy)."""
    ensure_private_dir(path, unsafe=store_unsafe)


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
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


__all__ = ["FROZEN_MODE", "ensure_dir", "read_small", "start_writeback", "store_unsafe", "unlink_quiet"]
