"""A record stream in a core journal file: open (replay), append (fold live), compact, read lock-free.

Files (``path`` is the stream's journal, any name)::

    path                  the live file: a core JournalLog (format: core/journal/_encoder.py)
    path.lock             its writer's flock
    path.seg-NNNNNN       finished segments: what a compaction rotated away (kept only with
                          ``keep_segments``, or until a crashed compaction is finished)

Replay folds the *sources* in order, oldest first: the segments, then the file. A source
that supersedes everything before it ends the walk back: one holding a ``compacted`` record
(the compaction's snapshot precedes it in that same source), or, as older writers left
them, one whose header meta says ``"compacted": true`` and that holds records. So nothing is lost if a compaction
crashes after rotating the file and before its snapshot is durable: the new file has no
``compacted`` record yet, and replay folds the segment it rotated.

Compaction (one mechanism for snapshot, compaction and retention): the caller gives the
records that re-create what it keeps (default: the stream's ``snapshot`` of the whole state;
retention is what the caller leaves out); the file is rotated into a segment, the snapshot,
the records kept unfolded (``UnknownRecords.KEEP``) and a ``compacted`` record naming the
superseded segments are appended as one batch (one fsync), then the segments are deleted
(unless the stream keeps them) and the directory fsynced. Afterwards the live state is the
fold of what was written: live and replayed state are the same by construction.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic

import anyio
import structlog

from ..files import fsync_dir
from ..journal import JournalLog, Record, read_records, segment_paths
from ._stream import COMPACTED, Compaction, Pair, RecordStream, RecordStreamError, S, StreamRecord, marker

log = structlog.get_logger("openfunctions.core.records")


def _header_meta(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        line = f.readline(1 << 20)
    try:
        meta = json.loads(line).get("meta")
    except (ValueError, AttributeError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _supersedes(records: list[Record], meta: dict[str, Any]) -> bool:
    """Whether a source supersedes every source before it: it holds a ``compacted`` record, or (as older
    task stores compacted) its header says ``"compacted": true`` and it holds records. A flagged file with
    none is what such a compaction left when it crashed after its rotation: the segment before it counts."""
    if any(r.type == COMPACTED for r in records):
        return True
    return meta.get("compacted") is True and bool(records)


class _Sources:
    """The records a replay folds, source by source, and the segments a finished compaction left behind."""

    def __init__(self, path: Path, current: list[Record]) -> None:
        self.folded: list[tuple[Path, list[Record]]] = [(path, current)]
        self.leftover: list[Path] = []  # segments named by the file's own compacted record
        done = next((r for r in reversed(current) if r.type == COMPACTED), None)
        segments = segment_paths(path)
        if done is not None:
            listed = done.data.get("segments")
            named = {x for x in listed if isinstance(x, str)} if isinstance(listed, list) else set()
            self.leftover = [p for p in segments if p.name in named]
            return
        if _supersedes(current, _header_meta(path)):
            return
        for seg in reversed(segments):
            records = list(read_records(seg))
            self.folded.insert(0, (seg, records))
            if _supersedes(records, _header_meta(seg)):
                return


class Replay(Generic[S]):
    """A stream's state as its stored records fold, and the records it kept unfolded."""

    def __init__(self, state: S, unknown: list[StreamRecord]) -> None:
        self.state = state
        self.unknown = unknown


def _fold(stream: RecordStream[S], sources: _Sources, state: S | None = None) -> Replay[S]:
    state = stream.new_state() if state is None else state
    unknown: list[StreamRecord] = []
    for where, records in sources.folded:
        stream.fold(records, state, where=where, unknown=unknown)
    return Replay(state, unknown)


def replay(stream: RecordStream[S], path: str | os.PathLike[str], *,
           check_header: Callable[[dict[str, Any]], None] | None = None) -> Replay[S]:
    """Fold the stream at ``path`` without taking its lock (for readers; a live writer may be appending).

    A stream that was never written folds to ``stream.new_state()``. ``check_header(meta)`` may refuse
    the file's header meta (another format or version) before anything is folded. Raises the journal's
    errors (JournalCorrupt, JournalUnsafe) and the stream's own for a record it cannot fold.
    """
    p = Path(os.path.abspath(path))
    for _ in range(_READ_TRIES - 1):
        try:
            before = os.stat(p).st_ino
        except FileNotFoundError:
            return Replay(stream.new_state(), [])
        try:
            sources = _read_sources(p, check_header)
            # A writer's compaction renamed the file into a segment while we read it: what we read as
            # "the file" may also be listed as that segment (folded twice). Read again.
            if os.stat(p).st_ino == before:
                return _fold(stream, sources)
        except FileNotFoundError:  # the file or a segment went while we read (rotated, or deleted by a compaction)
            pass
    if not os.path.lexists(p):
        return Replay(stream.new_state(), [])
    return _fold(stream, _read_sources(p, check_header))


#: How many times :func:`replay` reads a stream that a writer's compaction keeps changing under it.
_READ_TRIES = 5


def _read_sources(p: Path, check_header: Callable[[dict[str, Any]], None] | None) -> _Sources:
    if check_header is not None:
        check_header(_header_meta(p))
    return _Sources(p, list(read_records(p)))


class FileRecordLog(Generic[S]):
    """The open, locked stream at one path: its state and unknown records, live. Create with :meth:`open`."""

    def __init__(self, stream: RecordStream[S], log_: JournalLog, state: S, unknown: list[StreamRecord]) -> None:
        self.stream = stream
        self.log = log_
        self.state = state
        #: records of types the stream does not know, kept (``UnknownRecords.KEEP``): carried by compaction
        self.unknown = unknown
        self.path = log_.path
        self._onto = False  # opened onto the state of earlier files (see open): no compaction

    @classmethod
    async def open(cls, stream: RecordStream[S], path: str | os.PathLike[str], *,
                   meta: dict[str, Any] | None = None,
                   check_header: Callable[[dict[str, Any]], None] | None = None,
                   state: S | None = None) -> FileRecordLog[S]:
        """Open (creating if absent), lock and replay the stream at ``path``; a finished compaction's
        leftover segments are deleted now. ``meta``: a new file's header meta (default: the stream's).
        ``check_header(meta)``: may refuse the file's header meta before anything is folded. ``state``:
        fold the file onto it (the fold of the files before this one, for a stream kept as one file per
        writer, as the work attempt journal keeps one per lease generation); the log then holds and
        updates that object, and refuses to compact (its snapshot would repeat what the earlier files hold).

        Raises the journal's errors (JournalLocked, JournalCorrupt, JournalMismatch, JournalUnsafe)
        and the stream's own for a record it cannot fold; nothing is written then.
        """
        seen: list[Record] = []
        log_ = await JournalLog.open(path, kind=stream.kind, meta=stream.meta if meta is None else meta,
                                     on_record=seen.append)
        try:
            if check_header is not None:
                check_header(log_.header.meta)
            sources = await anyio.to_thread.run_sync(lambda: _Sources(log_.path, seen))
            folded = await anyio.to_thread.run_sync(lambda: _fold(stream, sources, state))
            if sources.leftover and not stream.keep_segments:
                await anyio.to_thread.run_sync(_drop_segments, sources.leftover, log_.path.parent)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await log_.close()
            raise
        self = cls(stream, log_, folded.state, folded.unknown)
        self._onto = state is not None
        for type_ in sorted({r.type for r in folded.unknown}):
            log.warning("records_of_unknown_type_kept", stream=stream.name, type=type_, path=str(log_.path),
                        hint="written by a newer version; kept, not folded")
        return self

    @property
    def header_meta(self) -> dict[str, Any]:
        return self.log.header.meta

    @property
    def size(self) -> int:
        return self.log.size

    async def append(self, type_: str, data: dict[str, Any]) -> Record:
        """Make one record durable, then fold it (both happen even if the caller is cancelled)."""
        with anyio.CancelScope(shield=True):
            rec = await self.log.append(type_, data)
        if not self.stream.apply(self.state, rec, self.path):
            self.unknown.append(rec)
        return rec

    async def append_many(self, records: Sequence[Pair]) -> list[Record]:
        """Make ``records`` durable as one group (one fsync), then fold each in order.

        Shielded: a record handed to the log is written even if the caller is cancelled, so the fold
        must see it too, or the live state and the file would diverge.
        """
        with anyio.CancelScope(shield=True):
            written = await self.log.append_many(records)
        for rec in written:
            if not self.stream.apply(self.state, rec, self.path):
                self.unknown.append(rec)
        return written

    async def compact(self, records: Sequence[Pair] | None = None, **info: Any) -> Compaction:
        """Rotate the file into a segment and write ``records`` (default: the stream's snapshot of the
        whole state), the kept unknown records and a ``compacted`` record (``info`` plus the superseded
        segments' names) as one batch; delete the segments (unless the stream keeps them). The live
        state becomes the fold of what was written."""
        if self._onto:
            raise RecordStreamError(f"{self.path}: a log opened onto earlier files' state does not compact")
        kept = list(self.stream.snapshot(self.state) if records is None else records)
        kept += [(r.type, r.data) for r in self.unknown]
        with anyio.CancelScope(shield=True):
            older = segment_paths(self.path)
            seg = await self.log.rotate(meta=self.stream.meta)
            segments = [*older, seg]
            batch = [*kept, marker([p.name for p in segments], info)]
            written = await self.log.append_many(batch)
            if not self.stream.keep_segments:
                await anyio.to_thread.run_sync(_drop_segments, segments, self.path.parent)
        unknown: list[StreamRecord] = []
        self.state = self.stream.fold(written, where=self.path, unknown=unknown)
        self.unknown = unknown
        return Compaction(len(batch), tuple(p.name for p in segments), dict(info))

    @property
    def failed(self) -> bool:
        return self.log.failed

    async def close(self) -> None:
        with anyio.CancelScope(shield=True):
            await self.log.close()

    def __repr__(self) -> str:
        return f"<FileRecordLog {self.stream.name} {str(self.path)!r}>"


def _drop_segments(paths: Sequence[Path], directory: Path) -> None:
    """Delete superseded segments and make that durable: in a worker thread, since unlinking a large
    file and fsyncing its directory can stall the event loop for tens of milliseconds."""
    for p in paths:
        _unlink(p)
    fsync_dir(directory)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


__all__ = ["FileRecordLog", "Replay", "replay"]
