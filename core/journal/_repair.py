"""Repair: cut a torn tail after saving its bytes, and keep a ``.pre-v2`` copy.

Repair only ever removes bytes the decoder classified as a torn tail (an
unterminated final fragment, a NUL-filled tail, a torn write into reserved
room: never acknowledged, because the newline is the commit marker and
acknowledgement follows fsync) or as reserved room (NUL bytes nobody wrote).
The written bytes go to ``<path>.broken`` (or ``<path>.broken.N`` if that
exists) first, fsynced, so nothing is destroyed without a copy.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from ..files import fsync_dir, write_atomic
from ._decoder import CHUNK, TornTail

log = structlog.get_logger("openfunctions.journal")


def _free_name(base: Path) -> Path:
    if not os.path.lexists(base):
        return base
    n = 1
    while os.path.lexists(f"{base}.{n}"):
        n += 1
    return Path(f"{base}.{n}")


def _read_range(fd: int, start: int, end: int) -> bytes:
    parts = []
    pos = start
    while pos < end:
        chunk = os.pread(fd, min(CHUNK, end - pos), pos)
        if not chunk:
            break
        parts.append(chunk)
        pos += len(chunk)
    return b"".join(parts)


def repair_torn_tail(fd: int, path: Path, torn: TornTail) -> Path:
    """Save the torn bytes to a ``.broken`` copy, then truncate and fsync. Returns the copy's path."""
    broken = _free_name(Path(f"{path}.broken"))
    # the bytes up to the last one written: NUL room a writer reserved after them is nothing to keep
    data = _read_range(fd, torn.offset, torn.offset + torn.data)
    write_atomic(broken, data)
    os.ftruncate(fd, torn.offset)
    os.fsync(fd)
    fsync_dir(path.parent)
    log.warning(
        "journal_torn_tail_repaired",
        path=str(path),
        offset=torn.offset,
        length=torn.length,
        reason=torn.reason,
        broken_copy=str(broken),
    )
    return broken


def drop_reserved(fd: int, path: Path, end: int) -> None:
    """Cut reserved room (NUL bytes after the last record) from a file that this open will append to, then
    fsync: a writer that does not reserve room appends at the end of the file."""
    os.ftruncate(fd, end)
    os.fsync(fd)
    log.info("journal_reserved_room_dropped", path=str(path), at=end)


def save_pre_v2(fd: int, path: Path, end: int) -> Path:
    """Copy the v1 bytes to ``<path>.pre-v2`` (atomically, fsynced) before the first v2 write."""
    copy = Path(f"{path}.pre-v2")
    write_atomic(copy, _read_range(fd, 0, end))
    log.info("journal_pre_v2_copy_saved", path=str(path), copy=str(copy), bytes=end)
    return copy


__all__ = ["drop_reserved", "repair_torn_tail", "save_pre_v2"]
