"""JournalLog: the one durable append-only log both journals are built on.

The byte format is written once, in ``_encoder.py``; docs/formats/journal.md covers the rest.
This module owns the *life* of a log:

- **open/recover**: create the directory (0700) and file (0600, header via
  temp file + fsync + rename + directory fsync) if absent; take the writer
  lock (:class:`JournalLocked` names the holder); validate every line
  (:class:`JournalCorrupt` names offset and line); cut a torn tail after
  saving it to ``.broken``; keep a ``.pre-v2`` copy of a v1 file.
- **append with group commit**: a record gets its ``seq`` and chain link the
  moment ``append`` is called (event-loop order is log order), is encoded
  right there (bad data raises before a seq is consumed) and is handed to
  the log's :class:`~._writer.GroupWriter`, whose thread writes everything
  queued with one ``write`` + one ``fdatasync`` and then wakes those
  appenders. So concurrent appenders share an fsync, and each returns only
  once its own record is durable. A caller cancelled while waiting is not
  acknowledged, but its record is still written (as any unacknowledged
  record may be).
- **on the loop, opt-in** (``sync_on_loop``; a server turns it on for its
  execution journal, ``serve --journal-sync loop``, the default):
  no writer thread; the first append of an event-loop iteration schedules one
  flush for the next iteration, which writes and syncs everything appended
  by then on the loop's thread (``_writer``'s "On the loop" says why: the
  thread's GIL contention cost a busy server more than the fsync's stall).
  Under load a batch is one iteration's appends; the loop is blocked for
  each fsync, so on a slow disk every connection waits for it.
- **reserved room, opt-in** (``open(preallocate=True)``, the execution
  journal's choice): the file is kept longer than its records, NUL bytes the
  writes fill, so an fsync commits no size change (``_writer``'s
  ``_reserve``; docs/formats/journal.md, "Reserved room"). Cut on close.
- **fail-stop**: a failed write or fsync poisons the log ("fsyncgate": the
  kernel may have dropped the dirty pages, a retry could ack lost data).
  Every queued and later append raises :class:`JournalFailed` until the
  journal is closed and reopened, which re-validates what is on disk.

Readers need no lock: :func:`read_records` streams a file any time and stops
quietly before an unterminated tail (which may be a live writer's write in
flight). ``append`` needs an asyncio event loop (anyio on asyncio, as the
project runs) and is not thread-safe: one loop appends at a time.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import anyio
import structlog

from .._stamps import new_id, utc_timestamp
from ..errors import NonJsonValue
from ..files import fsync_dir, write_atomic
from ._decoder import Decoder, ScanResult, data_end, scan
from ._encoder import encode_header, encode_record, new_salt
from ._fsutil import FileOps, ensure_private_dir, open_private, refuse_symlink
from ._lock import JournalLock
from ._record import CURRENT_VERSION, VERSION_V1, Header, Record
from ._repair import drop_reserved, repair_torn_tail, save_pre_v2
from ._writer import GroupWriter
from .errors import JournalClosed, JournalMismatch

log = structlog.get_logger("openfunctions.journal")


class JournalLog:
    """An open, locked, recovered journal file. Create with :meth:`open`."""

    # Whether every append is written and synced by the event loop itself, once per loop iteration for all
    # that iteration appended, instead of by the writer thread (``_writer``'s "On the loop"). Off by default;
    # a server turns it on for its execution journal (``serve --journal-sync``).
    sync_on_loop: bool = False

    def __init__(self) -> None:  # use JournalLog.open
        self.path: Path
        self.header: Header
        self.recovery: ScanResult
        self.repaired_tail: Path | None = None
        self.pre_v2_copy: Path | None = None
        self._fd = -1
        self._lock: JournalLock
        self._ops: FileOps
        self._next_seq = 1
        self._line_of_seq = 1  # a record's line number is its seq + this (the header is line 1)
        self._link = ""
        self._enqueued_size = 0
        self._writer: GroupWriter | None = None  # set once recovered
        self._preallocate = False
        self._closing = False
        self._closed = False

    # -- open / recover ---------------------------------------------------
    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], *, kind: str | None = None, meta: dict[str, Any] | None = None,
        on_record: Callable[[Record], None] | None = None, preallocate: bool = False, _ops: FileOps | None = None,
    ) -> JournalLog:
        """Open (creating if absent), lock and recover the journal at ``path``.

        ``kind`` (``"execution"``, ``"attempt"``, …) is written into a new
        header and must match an existing one (:class:`JournalMismatch`);
        ``None`` accepts any. ``meta`` goes into a new header only.
        ``on_record`` sees every valid record of the recovery scan (in a
        worker thread), so an owner can rebuild its state in the same pass;
        if open then raises, discard what it saw.
        ``preallocate``: keep room reserved ahead of the records (NUL bytes the
        writes then fill), so an fsync commits no size change; the file is cut
        back to its records on close. For a log whose every append waits for
        its fsync on the hot path (the execution journal); a lock-free reader
        that watches the file must then use :func:`file_stamp`, not its size.
        Raises JournalLocked, JournalCorrupt, JournalUnsafe.
        """
        return await anyio.to_thread.run_sync(
            lambda: cls.open_sync(path, kind=kind, meta=meta, on_record=on_record, preallocate=preallocate, _ops=_ops)
        )

    @classmethod
    def open_sync(
        cls, path: str | os.PathLike[str], *, kind: str | None = None, meta: dict[str, Any] | None = None,
        on_record: Callable[[Record], None] | None = None, preallocate: bool = False, _ops: FileOps | None = None,
    ) -> JournalLog:
        """Blocking :meth:`open` (recovery reads the whole file; call it off the event loop)."""
        self = cls()
        self.path = Path(os.path.abspath(path))
        self._ops = _ops or FileOps()
        ensure_private_dir(self.path.parent)
        refuse_symlink(self.path)
        self._lock = JournalLock(self.path)
        self._lock.acquire()
        self._preallocate = preallocate
        try:
            self._recover(kind, meta, on_record)
        except BaseException:
            self._close_now()
            raise
        return self

    def _recover(self, kind: str | None, meta: dict[str, Any] | None, on_record: Callable[[Record], None] | None) -> None:
        if not os.path.lexists(self.path):
            header = Header(CURRENT_VERSION, new_id("jnl"), kind or "log", utc_timestamp(), new_salt(), dict(meta or {}))
            write_atomic(self.path, encode_header(header))
        # Reserving room means writing inside the file, not at its end: no O_APPEND (the writer's writes are
        # sequential from the end of the data, where the fd is positioned below).
        self._fd = open_private(self.path, os.O_RDWR if self._preallocate else os.O_RDWR | os.O_APPEND)
        result = scan(self._fd, str(self.path), on_record=on_record, writer_gone=True)  # we hold the writer lock
        assert result.header is not None
        self.header = result.header
        if kind is not None and self.header.kind is not None and self.header.kind != kind:
            raise JournalMismatch(
                f"journal {str(self.path)!r} holds {self.header.kind!r} records, not {kind!r}",
                details={"path": str(self.path), "kind": self.header.kind, "wanted": kind},
            )
        if result.torn is not None:
            self.repaired_tail = repair_torn_tail(self._fd, self.path, result.torn)
        elif result.reserved and not self._preallocate:
            drop_reserved(self._fd, self.path, result.good_end)
        if self.header.version == VERSION_V1 and result.records == result.v1_records and result.good_end > 0:
            # No v2 record yet: this open may write the first one.
            self.pre_v2_copy = save_pre_v2(self._fd, self.path, result.good_end)
        self.recovery = result
        self._next_seq = result.last_seq + 1
        headerless = self.header.journal_id is None and result.header_end == 0
        self._line_of_seq = 0 if headerless else 1
        self._link = result.last_link
        self._enqueued_size = result.good_end
        reserved = None
        if self._preallocate:
            os.lseek(self._fd, result.good_end, os.SEEK_SET)
            reserved = result.good_end + (result.reserved if result.torn is None else 0)
        self._writer = GroupWriter(self._fd, self._ops, str(self.path), result.last_seq, result.good_end,
                                   reserved=reserved)

    # -- properties --------------------------------------------------------
    @property
    def last_seq(self) -> int:
        """The seq of the last durable (acknowledged or recovered) record."""
        return self._writer.durable_seq if self._writer else 0

    @property
    def journal_id(self) -> str | None:
        return self.header.journal_id

    @property
    def failed(self) -> bool:
        return self._writer is not None and self._writer.failure is not None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def size(self) -> int:
        """Bytes on disk that are durable."""
        return self._writer.durable_size if self._writer else 0

    # -- append ------------------------------------------------------------
    async def append(self, type: str, data: dict[str, Any], *, queued: Callable[[], None] | None = None) -> Record:
        """Append one record; returns it once it is written and fsynced.

        ``queued()``, if given, is called once the record has its seq and its
        place in the file's order (queued for the writer), before it is durable; not called if the append raises first.
        Any record appended after that call is durable only after this one.

        Raises JournalFailed (this or an earlier write/fsync failed),
        JournalClosed, NonJsonValue (``data`` has no JSON form; no seq is
        consumed). If the caller is cancelled while waiting, the record is
        still written; it is just not acknowledged to that caller.
        """
        writer = self._writable()
        seq, prev = self._next_seq, self._link
        line, chk, rec = self._encode(type, data, seq, prev, self._enqueued_size, seq + self._line_of_seq)
        await self._durable(writer, [line], seq, seq + 1, chk, self._enqueued_size + len(line), queued)
        return rec

    async def append_encoded(
        self, type: str, data_text: str, *, queued: Callable[[], None] | None = None
    ) -> int:
        """:meth:`append` for data already in canonical JSON; returns the record's seq.

        ``data_text`` must be ``canonical_json(data)`` of a JSON object, e.g.
        ``Receipt.canonical_json()`` (memoized, so a served call encodes its
        receipt once, for the journal line and the reply). The line's bytes are
        exactly :meth:`append`'s for the same data. No :class:`Record` is built
        (the executor's sink never reads it). Same durability, ``queued`` and
        errors as :meth:`append`; text that is not canonical would be refused
        as corrupt by the next open, so only pass text from ``canonical_json``.
        """
        writer = self._writable()
        _check_type(type)
        if not isinstance(data_text, str) or not data_text.startswith("{"):
            raise NonJsonValue("journal record data must be the canonical JSON text of an object")
        seq = self._next_seq
        line, chk = encode_record(seq, type, utc_timestamp(), None, self._link, data_text)
        await self._durable(writer, [line], seq, seq + 1, chk, self._enqueued_size + len(line), queued)
        return seq

    async def append_many(self, records: Iterable[tuple[str, dict[str, Any]]]) -> list[Record]:
        """Append ``(type, data)`` records as one group: consecutive seqs, one
        wait; returns them once all are written and fsynced.

        All or nothing before anything is queued: if one ``data`` has no
        JSON form, NonJsonValue is raised and no seq is consumed. After that,
        the group shares the fate of the batch it lands in (one write, one
        fsync), and like :meth:`append` a cancelled caller's records are still
        written. For callers that have many records at once (recovery
        writing a receipt per unsettled start): one await instead of one per
        record.
        """
        writer = self._writable()
        seq, prev, offset = self._next_seq, self._link, self._enqueued_size
        lines: list[bytes] = []
        out: list[Record] = []
        for type, data in records:
            line, prev, rec = self._encode(type, data, seq, prev, offset, seq + self._line_of_seq)
            lines.append(line)
            out.append(rec)
            seq, offset = seq + 1, offset + len(line)
        if not out:
            return out
        await self._durable(writer, lines, seq - 1, seq, prev, offset, None)
        return out

    async def _durable(
        self, writer: GroupWriter, lines: list[bytes], last_seq: int, next_seq: int, link: str, size: int,
        queued: Callable[[], None] | None,
    ) -> None:
        """Make ``lines`` durable, then return; the log's position moves to
        (``next_seq``, ``link``, ``size``) once they are queued.

        The writer thread writes them with whatever else is queued (group
        commit), or with ``sync_on_loop`` the loop's next flush does; either
        way we wait for their fsync.
        """
        waiter = asyncio.get_running_loop().create_future()
        # raises JournalFailed before any seq is consumed
        writer.enqueue(lines, last_seq, waiter, waiter.get_loop(), on_loop=self.sync_on_loop)
        self._next_seq, self._link, self._enqueued_size = next_seq, link, size
        if queued is not None:
            queued()
        await waiter

    def _writable(self) -> GroupWriter:
        writer = self._writer
        if self._closing or writer is None:
            raise JournalClosed(f"journal {str(self.path)!r} is closed", details={"path": str(self.path)})
        if writer.failure is not None:
            raise writer.failed_error()
        return writer

    @staticmethod
    def _encode(type: str, data: dict[str, Any], seq: int, prev: str, offset: int, line_no: int) -> tuple[bytes, str, Record]:
        """The record's line, its checksum (the next record's ``prev``) and the record."""
        _check_type(type)
        if not isinstance(data, dict):
            raise NonJsonValue(f"journal record data must be a JSON object, got {data.__class__.__name__}")
        time = utc_timestamp()
        line, chk = encode_record(seq, type, time, data, prev)
        return line, chk, Record(seq, type, time, data, chk, prev, CURRENT_VERSION, offset, line_no)

    # -- segments ----------------------------------------------------------
    async def rotate(self, *, meta: dict[str, Any] | None = None) -> Path:
        """Close this file as a finished segment and continue in a fresh one.

        Waits for queued appends, renames the file to the next free
        ``<name>.seg-<n>`` (read-only history, still a complete journal that
        ``journal verify`` checks), then creates a new file at the same path
        whose header ``meta`` holds ``meta`` plus ``previous``: the old
        segment's file name, journal id, last seq and last link. seq restarts
        at 1 in the new segment. The writer lock is held throughout.

        Crash-safe: the rename is atomic and its directory is fsynced before
        the new file is created. A crash between the two leaves no file at
        the path; the next open creates a fresh journal (without the
        ``previous`` link) and nothing acknowledged is lost: it is all in
        the segment. Returns the segment's path.

        The switch itself runs on the event loop (a rename and a new header:
        three fsyncs), so no append can slip in between; meant for open time.
        If it fails, the log refuses further appends (reopen it).
        """
        writer = self._writable()
        while writer.busy():
            await anyio.to_thread.run_sync(writer.drain)
            writer = self._writable()
        try:
            return self._rotate_sync(dict(meta or {}))
        except BaseException:
            self._closing = True  # half-switched: only close() and a reopen are safe now
            raise

    def _rotate_sync(self, meta: dict[str, Any]) -> Path:
        assert self._writer is not None
        segment = next_segment_path(self.path)
        previous = {
            "file": segment.name,
            "journal_id": self.header.journal_id,
            "last_seq": self._writer.durable_seq,
            "last_link": self._link,
        }
        self._writer.stop()
        self._cut_reserved(sync=True)  # a finished segment is exactly its records
        os.rename(self.path, segment)
        fsync_dir(self.path.parent)
        os.close(self._fd)
        self._fd = -1
        # No file at the path now: recovery creates the new one, exactly as a first open does.
        self._recover(self.header.kind, {**meta, "previous": previous}, None)
        return segment

    # -- read --------------------------------------------------------------
    def records(self, *, after_seq: int = 0) -> Iterator[Record]:
        """Stream the durable records (validated again), optionally those after ``after_seq``."""
        fd = open_private(self.path, os.O_RDONLY)
        try:
            for rec in Decoder(fd, str(self.path), limit=self.size):
                if rec.seq > after_seq:
                    yield rec
        finally:
            os.close(fd)

    # -- close -------------------------------------------------------------
    async def close(self) -> None:
        """Wait for queued appends to become durable, then release the file and the lock."""
        if self._closed:
            return
        self._closing = True
        if self._writer is not None and self._writer.busy():
            await anyio.to_thread.run_sync(self._writer.drain)
        self._close_now()

    def _close_now(self) -> None:
        """Release everything at once (also what a crash looks like to the file):
        queued appends are dropped, an in-flight write is finished first."""
        self._closed = self._closing = True
        if self._writer is not None:
            self._writer.stop()
            self._cut_reserved(sync=False)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._lock.release()

    def _cut_reserved(self, *, sync: bool) -> None:
        """After the writer stopped: cut reserved room, so a closed log is exactly its records. Not after a
        failed write (what is on disk past the durable size is unknown: the next open judges it). Without
        ``sync`` the cut may be lost in a crash, which leaves reserved room the next open recognises."""
        writer = self._writer
        if writer is None or not writer.reserves or writer.failure is not None or self._fd < 0:
            return
        try:
            os.ftruncate(self._fd, writer.durable_size)
            if sync:
                self._ops.sync(self._fd)
        except OSError as exc:
            if sync:
                raise
            log.warning("journal_reserved_room_kept", path=str(self.path), error=str(exc))

    def __del__(self) -> None:
        # Safety net for a log dropped without close(): stop the writer, free
        # the fd and the flock so this process can reopen it. Queued appends
        # are not awaited. The collector may run this on the writer thread
        # itself, possibly while it holds its lock or is about to write: then
        # the thread closes the fd and releases the flock when it stops.
        if getattr(self, "_closed", True) or getattr(self, "_fd", -1) < 0:
            return
        try:
            writer = self._writer
            if writer is not None and writer.on_writer_thread():
                fd, lock = self._fd, self._lock
                self._closed = self._closing = True
                self._fd = -1

                def release() -> None:
                    os.close(fd)
                    lock.release()

                writer.abandon(release)
                return
            self._close_now()
        except Exception:
            pass

    async def __aenter__(self) -> JournalLog:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<JournalLog {str(self.path)!r} last_seq={self.last_seq}{' FAILED' if self.failed else ''}>"


def _check_type(type: str) -> None:
    if not isinstance(type, str) or not type:
        raise ValueError("journal record type must be a non-empty string")


SEGMENT_MARK = ".seg-"


def segment_paths(path: str | os.PathLike[str]) -> list[Path]:
    """The finished segments of the journal at ``path``, oldest first."""
    p = Path(os.path.abspath(path))
    found = []
    for entry in os.scandir(p.parent) if p.parent.is_dir() else ():
        name = entry.name
        if name.startswith(p.name + SEGMENT_MARK) and name[len(p.name) + len(SEGMENT_MARK):].isdigit():
            found.append((int(name[len(p.name) + len(SEGMENT_MARK):]), p.parent / name))
    return [q for _, q in sorted(found)]


def next_segment_path(path: Path) -> Path:
    existing = segment_paths(path)
    n = int(existing[-1].name.rsplit(SEGMENT_MARK, 1)[1]) + 1 if existing else 1
    return path.with_name(f"{path.name}{SEGMENT_MARK}{n:06d}")


def file_stamp(path: str | os.PathLike[str]) -> tuple[int, int, int, int, int] | None:
    """What a lock-free reader polls to tell whether a journal file changed: ``(device, inode, size, mtime_ns,
    end of the data)``; ``None`` while no file is there (mid-rotation).

    The size alone does not move while a writer fills room it reserved (``JournalLog.open(preallocate=True)``),
    and the mtime's granularity is the kernel's clock tick, so two appends within one tick look alike by
    ``stat``; the end of the data (:func:`~._decoder.data_end`, a few one-byte reads) moves with every append.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        end = data_end(fd, st.st_size) if stat.S_ISREG(st.st_mode) else st.st_size
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, end
    finally:
        os.close(fd)


def read_records(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Stream validated records without taking the lock (for inspection).

    Raises JournalCorrupt for interior damage and JournalUnsafe for an
    unsafe path; stops before an unterminated or NUL-filled tail, which may
    be a live writer's write in flight, and before room a writer reserved. Next to a live writer it may also
    yield complete records whose fsync has not finished (not yet
    acknowledged to their appender).
    """
    p = Path(os.path.abspath(path))
    fd = open_private(p, os.O_RDONLY)
    try:
        yield from Decoder(fd, str(p))
    finally:
        os.close(fd)


__all__ = ["JournalLog", "file_stamp", "read_records", "segment_paths", "next_segment_path", "SEGMENT_MARK"]
