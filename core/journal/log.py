"""JournalLog: the one durable append-only log both journals are built on.

The byte format is documented in ``_encoder.py`` (and docs/formats/journal.md).
This module owns the *life* of a log:

- **open/recover**: create the directory (0700) and file (0600, header via
  temp file + fsync + rename + directory fsync) if absent; take the writer
  lock (:class:`JournalLocked` names the holder); validate every line
  (:class:`JournalCorrupt` names offset and line); cut a torn tail after
  saving it to ``.broken``; keep a ``.pre-v2`` copy of a v1 file.
- **append with group commit**: a record gets its ``seq`` and chain link the
  moment ``append`` is called (event-loop order is log order). The first
  appender that finds no flush running becomes the leader: it takes every
  queued line, does one ``write`` + one ``fdatasync`` in a worker thread,
  wakes that batch, and hands leadership to the next queued appender. So
  concurrent appenders share an fsync, and each returns only once its own
  record is durable. The wait is shielded from cancellation: a record that
  was queued is written; cancelling the caller only delays the delivery.
- **fail-stop**: a failed write or fsync poisons the log ("fsyncgate": the
  kernel may have dropped the dirty pages, a retry could ack lost data).
  Every queued and later append raises :class:`JournalFailed` until the
  journal is closed and reopened, which re-validates what is on disk.

Readers need no lock: :func:`read_records` streams a file any time and stops
quietly before an unterminated tail (which may be a live writer's write in
flight). Requires an asyncio event loop (anyio on asyncio) for ``append``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import anyio

from ..canonical import check_json
from ..errors import JournalFailed, NonJsonValue
from ..receipts import new_id, utc_now
from ._decoder import Decoder, ScanResult
from ._encoder import encode_header, encode_record, new_salt
from ._fsutil import FileOps, create_file_atomically, ensure_private_dir, open_private, refuse_symlink
from ._lock import JournalLock
from ._record import CURRENT_VERSION, VERSION_V1, Header, Record
from ._repair import repair_torn_tail, save_pre_v2
from .errors import JournalClosed, JournalMismatch


@dataclass(eq=False)
class _Pending:
    line: bytes
    record: Record | None
    done: bool = False
    error: BaseException | None = None
    wake: anyio.Event = field(default_factory=anyio.Event)


class JournalLog:
    """An open, locked, recovered journal file. Create with :meth:`open`."""

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
        self._durable_seq = 0
        self._next_line = 2
        self._link = ""
        self._enqueued_size = 0
        self._durable_size = 0
        self._queue: list[_Pending] = []
        self._flushing = False
        self._failed: BaseException | None = None
        self._closed = False

    # -- open / recover ---------------------------------------------------
    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], *, kind: str | None = None, meta: dict[str, Any] | None = None,
        _ops: FileOps | None = None,
    ) -> JournalLog:
        """Open (creating if absent), lock and recover the journal at ``path``.

        ``kind`` (``"execution"``, ``"attempt"``, …) is written into a new
        header and must match an existing one (:class:`JournalMismatch`);
        ``None`` accepts any. ``meta`` goes into a new header only.
        Raises JournalLocked, JournalCorrupt, JournalUnsafe.
        """
        return await anyio.to_thread.run_sync(lambda: cls.open_sync(path, kind=kind, meta=meta, _ops=_ops))

    @classmethod
    def open_sync(
        cls, path: str | os.PathLike[str], *, kind: str | None = None, meta: dict[str, Any] | None = None,
        _ops: FileOps | None = None,
    ) -> JournalLog:
        """Blocking :meth:`open` (recovery reads the whole file; call it off the event loop)."""
        self = cls()
        self.path = Path(os.path.abspath(path))
        self._ops = _ops or FileOps()
        ensure_private_dir(self.path.parent)
        refuse_symlink(self.path)
        self._lock = JournalLock(self.path)
        self._lock.acquire()
        try:
            self._recover(kind, meta)
        except BaseException:
            if self._fd >= 0:
                os.close(self._fd)
            self._lock.release()
            raise
        return self

    def _recover(self, kind: str | None, meta: dict[str, Any] | None) -> None:
        if not os.path.lexists(self.path):
            if meta is not None:
                check_json(meta)
            header = Header(CURRENT_VERSION, new_id("jnl"), kind or "log", utc_now(), new_salt(), dict(meta or {}))
            create_file_atomically(self.path, encode_header(header))
        self._fd = open_private(self.path, os.O_RDWR | os.O_APPEND)
        result = _scan(self._fd, str(self.path))
        assert result.header is not None
        self.header = result.header
        if kind is not None and self.header.kind is not None and self.header.kind != kind:
            raise JournalMismatch(
                f"journal {str(self.path)!r} holds {self.header.kind!r} records, not {kind!r}",
                details={"path": str(self.path), "kind": self.header.kind, "wanted": kind},
            )
        if result.torn is not None:
            self.repaired_tail = repair_torn_tail(self._fd, self.path, result.torn)
        if self.header.version == VERSION_V1 and result.records == result.v1_records and result.good_end > 0:
            # No v2 record yet: this open may write the first one.
            self.pre_v2_copy = save_pre_v2(self._fd, self.path, result.good_end)
        self.recovery = result
        self._next_seq = result.last_seq + 1
        self._durable_seq = result.last_seq
        headerless = self.header.journal_id is None and result.header_end == 0
        self._next_line = result.last_seq + (1 if headerless else 2)
        self._link = result.last_link
        self._enqueued_size = self._durable_size = result.good_end

    # -- properties --------------------------------------------------------
    @property
    def last_seq(self) -> int:
        """The seq of the last durable (acknowledged or recovered) record."""
        return self._durable_seq

    @property
    def journal_id(self) -> str | None:
        return self.header.journal_id

    @property
    def failed(self) -> bool:
        return self._failed is not None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def size(self) -> int:
        """Bytes on disk that are durable."""
        return self._durable_size

    # -- append ------------------------------------------------------------
    async def append(self, type: str, data: dict[str, Any]) -> Record:
        """Append one record; returns it once it is written and fsynced."""
        self._check_writable()
        if not isinstance(type, str) or not type:
            raise ValueError("journal record type must be a non-empty string")
        if not isinstance(data, dict):
            raise NonJsonValue(f"journal record data must be a JSON object, got {data.__class__.__name__}")
        time = utc_now()
        seq = self._next_seq
        line, chk = encode_record(seq, type, time, data, self._link)
        rec = Record(seq, type, time, data, chk, self._link, CURRENT_VERSION, self._enqueued_size, self._next_line)
        self._next_seq += 1
        self._next_line += 1
        self._link = chk
        self._enqueued_size += len(line)
        entry = _Pending(line, rec)
        self._queue.append(entry)
        with anyio.CancelScope(shield=True):
            await self._commit(entry)
        if entry.error is not None:
            raise entry.error
        return rec

    def _check_writable(self) -> None:
        if self._closed:
            raise JournalClosed(f"journal {str(self.path)!r} is closed", details={"path": str(self.path)})
        if self._failed is not None:
            raise self._failed_error()

    def _failed_error(self) -> JournalFailed:
        return JournalFailed(
            f"journal {str(self.path)!r} refuses writes after a failed write/fsync ({self._failed}); "
            "close and reopen it to recover",
            details={"path": str(self.path), "cause": str(self._failed)},
        )

    async def _commit(self, entry: _Pending) -> None:
        while not entry.done:
            if not self._flushing:
                self._flushing = True
                try:
                    await self._flush_batch()
                finally:
                    self._flushing = False
                    if self._queue:
                        self._queue[0].wake.set()  # hand leadership over
            else:
                ev = entry.wake
                await ev.wait()
                if not entry.done and ev is entry.wake:
                    entry.wake = anyio.Event()

    async def _flush_batch(self) -> None:
        batch, self._queue = self._queue, []
        data = b"".join(e.line for e in batch)
        try:
            await anyio.to_thread.run_sync(self._write_durably, data)
        except Exception as exc:
            self._failed = exc
            err = self._failed_error()
            rest, self._queue = self._queue, []
            for e in batch + rest:
                e.error, e.done = err, True
                e.wake.set()
            return
        self._durable_size += len(data)
        for e in batch:
            if e.record is not None:
                self._durable_seq = e.record.seq
            e.done = True
            e.wake.set()

    def _write_durably(self, data: bytes) -> None:
        if data:
            self._ops.write_all(self._fd, data)
        self._ops.sync(self._fd)

    # -- read --------------------------------------------------------------
    def records(self, *, after_seq: int = 0) -> Iterator[Record]:
        """Stream the durable records (validated again), optionally those after ``after_seq``."""
        fd = open_private(self.path, os.O_RDONLY)
        try:
            for rec in Decoder(fd, str(self.path), limit=self._durable_size):
                if rec.seq > after_seq:
                    yield rec
        finally:
            os.close(fd)

    # -- close -------------------------------------------------------------
    async def close(self) -> None:
        """Wait for queued appends to become durable, then release the file and the lock."""
        if self._closed:
            return
        if self._failed is None and (self._queue or self._flushing):
            sentinel = _Pending(b"", None)
            self._queue.append(sentinel)
            with anyio.CancelScope(shield=True):
                await self._commit(sentinel)
        self._close_now()

    def _close_now(self) -> None:
        self._closed = True
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._lock.release()

    async def __aenter__(self) -> JournalLog:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<JournalLog {str(self.path)!r} last_seq={self.last_seq}{' FAILED' if self.failed else ''}>"


def _scan(fd: int, path: str) -> ScanResult:
    d = Decoder(fd, path)
    for _ in d:
        pass
    return d.result


def read_records(path: str | os.PathLike[str]) -> Iterator[Record]:
    """Stream validated records without taking the lock (for inspection).

    Raises JournalCorrupt for interior damage and JournalUnsafe for an
    unsafe path; stops before an unterminated or NUL-filled tail, which may
    be a live writer's write in flight.
    """
    p = Path(os.path.abspath(path))
    fd = open_private(p, os.O_RDONLY)
    try:
        yield from Decoder(fd, str(p))
    finally:
        os.close(fd)


__all__ = ["JournalLog", "read_records"]
