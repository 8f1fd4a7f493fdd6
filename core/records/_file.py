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

Background compaction (:meth:`FileRecordLog.compact_background`, the same snapshot and retention,
for a stream whose writers must not wait while a large snapshot is written, such as the local
store)::

    path.compact          the new file while it is written (a complete journal); deleted at open
    path.compact.lock     its writer lock while it is written

1. in one event-loop step: take the snapshot (the caller's records, or the stream's ``snapshot``)
   and start the *tail*: every record handed to the log from then on, plus those already handed
   to it and not yet folded (so each record is in the snapshot or in the tail, once);
2. write the snapshot and the kept unknown records to ``path.compact``, header meta plus
   ``"compacted": true, "whole": true``; copy the tail over while it grows; writes go on into
   the old file meanwhile;
3. switch: new writes wait (reads do not); the old file's queued appends become durable and it
   closes, the rest of the tail is appended, the new file is fsynced and renamed over ``path``,
   the directory fsynced, older segments deleted, and the file reopened; the waiting writes go
   to it.

Until the rename the old file is the whole truth (every acknowledged record is in it); after it
the new file is: a complete journal, so the rename is the commit and no ``compacted`` record is
written (a stream that refuses unknown types reads it as before). Its header flags make it
supersede any segment before it, even when it holds no record (``whole``: it was never a
rotation's empty file). The live state is not re-folded: it already is the fold of the snapshot
and the tail. A writer that applies a record to its state *before* handing it to the log
(:meth:`FileRecordLog.write`, the local store) may see that record in both the snapshot and the
tail: such a stream's fold must be idempotent (the store's records carry absolute versions).
Between the old file's close and the reopen the path's lock is free for an instant; a rival that
takes it reads a complete file (old or new) and this log then fails (``failed``), losing nothing.
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
    none is what such a compaction left when it crashed after its rotation: the segment before it counts;
    unless it is also flagged ``"whole"`` (a background compaction's, renamed into place complete)."""
    if any(r.type == COMPACTED for r in records):
        return True
    return meta.get("compacted") is True and (bool(records) or meta.get("whole") is True)


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
        # A background compaction's bookkeeping (module docstring): the records handed to the log and not
        # yet folded (by call), the tail it copies to the new file, the gate writes wait at while it switches.
        self._inflight: dict[object, Sequence[Pair]] = {}
        self._tail: list[Pair] | None = None
        self._gate: anyio.Event | None = None
        self._broken: BaseException | None = None  # a background compaction's switch failed halfway
        self._rotating = False  # compact() is running

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
            await anyio.to_thread.run_sync(drop_unfinished, log_.path)
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

    async def _hand(self, pairs: Sequence[Pair]) -> JournalLog:
        """Wait while a background compaction switches files; note what goes to the old file for it."""
        while self._gate is not None:
            await self._gate.wait()
        return self._note(pairs)

    def _note(self, pairs: Sequence[Pair]) -> JournalLog:
        if self._broken is not None:
            raise RecordStreamError(f"{self.path}: a compaction failed while switching files ({self._broken}); "
                                    "reopen the stream (nothing acknowledged was lost)")
        if self._tail is not None:
            self._tail.extend(pairs)
        return self.log

    async def append(self, type_: str, data: dict[str, Any]) -> Record:
        """Make one record durable, then fold it (both happen even if the caller is cancelled)."""
        pair = [(type_, data)]
        log_ = self._note(pair) if self._gate is None else await self._hand(pair)
        token = object()
        self._inflight[token] = pair
        try:
            with anyio.CancelScope(shield=True):
                rec = await log_.append(type_, data)
            if not self.stream.apply(self.state, rec, self.path):
                self.unknown.append(rec)
        finally:
            del self._inflight[token]
        return rec

    async def write(self, type_: str, data: dict[str, Any]) -> Record:
        """Make one record durable *without* folding it: for a writer that applied it to ``state`` itself
        when it queued it (the local store: a value is served once acknowledged, durable before a read
        returns it). A background compaction may then copy it in both its snapshot and its tail, so such
        a stream's fold must be idempotent (module docstring)."""
        pair = [(type_, data)]
        log_ = self._note(pair) if self._gate is None else await self._hand(pair)
        # Not shielded: there is no fold to keep in step, and a record handed to the journal is written even
        # if its caller is cancelled (JournalLog.append).
        return await log_.append(type_, data)

    async def append_many(self, records: Sequence[Pair]) -> list[Record]:
        """Make ``records`` durable as one group (one fsync), then fold each in order.

        Shielded: a record handed to the log is written even if the caller is cancelled, so the fold
        must see it too, or the live state and the file would diverge.
        """
        records = list(records)
        log_ = self._note(records) if self._gate is None else await self._hand(records)
        token = object()
        self._inflight[token] = records
        try:
            with anyio.CancelScope(shield=True):
                written = await log_.append_many(records)
            for rec in written:
                if not self.stream.apply(self.state, rec, self.path):
                    self.unknown.append(rec)
        finally:
            del self._inflight[token]
        return written

    async def compact(self, records: Sequence[Pair] | None = None, **info: Any) -> Compaction:
        """Rotate the file into a segment and write ``records`` (default: the stream's snapshot of the
        whole state), the kept unknown records and a ``compacted`` record (``info`` plus the superseded
        segments' names) as one batch; delete the segments (unless the stream keeps them). The live
        state becomes the fold of what was written."""
        self._can_compact()
        kept = list(self.stream.snapshot(self.state) if records is None else records)
        kept += [(r.type, r.data) for r in self.unknown]
        self._rotating = True
        try:
            return await self._rotate_compact(kept, info)
        finally:
            self._rotating = False

    async def _rotate_compact(self, kept: list[Pair], info: dict[str, Any]) -> Compaction:
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

    def _can_compact(self) -> None:
        if self._onto:
            raise RecordStreamError(f"{self.path}: a log opened onto earlier files' state does not compact")
        if self._tail is not None or self._gate is not None or self._rotating:
            raise RecordStreamError(f"{self.path}: a {'' if self._rotating else 'background '}compaction is running")
        if self._broken is not None:
            raise RecordStreamError(f"{self.path}: a compaction failed while switching files; reopen the stream")

    async def compact_background(self, records: Sequence[Pair] | None = None, *,
                                 meta: dict[str, Any] | None = None, **info: Any) -> Compaction:
        """Compact as :meth:`compact` does (``records``: what to keep, default the stream's snapshot of the
        whole state), while appends go on: they wait only for the switch (module docstring). ``meta``: the
        new file's header meta (default: the stream's), e.g. a floor the stream keeps there. The snapshot is
        taken when this is called, before its first await. ``info`` is returned, not written (the new file
        holds no ``compacted`` record). Raises the journal's errors; if the switch fails halfway, the log
        refuses further writes (``failed``) and the file on disk is complete (the old one or the new one)."""
        self._can_compact()
        if self.stream.keep_segments:
            raise RecordStreamError(f"{self.path}: the {self.stream.name} stream keeps its history in segments; "
                                    "it compacts by rotating (compact), not in the background")
        kept = list(self.stream.snapshot(self.state) if records is None else records)
        kept += [(r.type, r.data) for r in self.unknown]
        # Handed to the old file, not yet folded, so not in the snapshot: they lead the tail.
        tail: list[Pair] = [p for pairs in self._inflight.values() for p in pairs]
        self._tail = tail
        tmp = Path(f"{self.path}{UNFINISHED}")
        header = {**(self.stream.meta if meta is None else meta), "compacted": True, "whole": True}
        new: JournalLog | None = None
        old = self.log
        try:
            with anyio.CancelScope(shield=True):
                new = await JournalLog.open(tmp, kind=self.stream.kind, meta=header)
                for i in range(0, len(kept), _CHUNK):
                    await new.append_many(kept[i:i + _CHUNK])
                while len(tail) > _CATCH_UP:  # catch up while writes go on
                    batch = tail[:]
                    del tail[:len(batch)]
                    await new.append_many(batch)
                # Switch: new writes wait at the gate; what passed it is queued in the old file, which close()
                # makes durable. Until the rename below the old file is the whole truth.
                self._gate = anyio.Event()
                await old.close()
                if old.failed:
                    raise RecordStreamError(f"{self.path}: a write failed during the compaction")
                if tail:
                    await new.append_many(tail)
                await new.close()
                segments = segment_paths(self.path)
                await anyio.to_thread.run_sync(_switch, tmp, self.path, segments)
                self.log = await JournalLog.open(self.path, kind=self.stream.kind)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                if new is not None:
                    await new.close()
                if old.closed and self.log is old:
                    # The files are consistent (the old one until the rename, the new one after), but this
                    # process cannot go on writing through this object.
                    self._broken = exc
                await anyio.to_thread.run_sync(drop_unfinished, self.path)  # (gone already after the rename)
            raise
        finally:
            self._tail = None
            gate, self._gate = self._gate, None
            if gate is not None:
                gate.set()
        return Compaction(len(kept), tuple(p.name for p in segments), dict(info))

    @property
    def compacting(self) -> bool:
        return self._tail is not None

    @property
    def failed(self) -> bool:
        return self._broken is not None or self.log.failed

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


#: The suffix of a background compaction's file while it is written.
UNFINISHED = ".compact"
_CHUNK = 250  # snapshot records per append_many: the loop encodes each batch while writers wait, so keep it short (one fsync each, on the writer thread)
_CATCH_UP = 1_000  # tail records left for the switch, where writes wait


def drop_unfinished(path: Path) -> None:
    """Delete what an unfinished background compaction left next to ``path`` (the caller holds its lock)."""
    for p in (Path(f"{path}{UNFINISHED}"), Path(f"{path}{UNFINISHED}.lock")):
        _unlink(p)


def _switch(tmp: Path, path: Path, segments: Sequence[Path]) -> None:
    os.rename(tmp, path)  # the commit: the new file is complete and durable (closed after its fsync)
    fsync_dir(path.parent)
    _unlink(Path(f"{tmp}.lock"))
    if segments:  # superseded by the new file's header (whole): safe to delete now
        _drop_segments(segments, path.parent)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


__all__ = ["FileRecordLog", "Replay", "drop_unfinished", "replay"]
