"""A record stream's definition: its record types, its one fold, its policy for records it does not know.

A :class:`RecordStream` says *what* a stream is; where its records live is a
backend's business (``_file.py``: a core journal file and its segments;
``_table.py``: rows of a shared table behind :class:`RecordTable`). Every
backend folds through :meth:`RecordStream.apply`, live (each record right
after it is durable) and at replay (reading what is stored), so the two
cannot disagree.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from ..errors import OpenFunctionsError

S = TypeVar("S")

#: A record as a writer hands it to a backend: ``(type, data)``.
Pair = tuple[str, dict[str, Any]]

#: The record type a compaction writes last (``data``: ``segments``, the files it superseded, plus what the
#: stream's caller reports, e.g. ``kept``/``pruned``). Not folded; a reader that meets it knows that
#: everything before the records preceding it is superseded.
COMPACTED = "compacted"


class RecordStreamError(OpenFunctionsError):
    """A record stream could not be read or written as its definition says."""

    code = "record_stream_error"


class UnknownRecordType(RecordStreamError):
    """A record of a type the stream does not know (a newer writer's), in a stream that refuses them."""

    code = "record_type_unknown"


class RecordMalformed(RecordStreamError):
    """A record of a known type that the stream's fold cannot apply (a missing field, a wrong type)."""

    code = "record_malformed"


class UnknownRecords(enum.Enum):
    """What a stream does with a record whose type it does not know. Either way it never silently vanishes.

    - ``REFUSE``: reading fails closed (:class:`UnknownRecordType`, naming the record, through the
      stream's ``malformed`` hook): for streams whose state decides authority or effects, where acting on
      a partial fold would be wrong.
    - ``KEEP``: the record is not folded but kept: a backend lists it (``unknown``), logs it once per type,
      and carries it through compaction (re-written after the snapshot), so a newer writer's record
      survives an older reader; for streams whose older readers may safely ignore what they do not know.
    """

    REFUSE = "refuse"
    KEEP = "keep"


class StreamRecord(Protocol):
    """What a fold sees of a record: a journal :class:`~openfunctions.core.journal.Record`, a table row."""

    @property
    def seq(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def time(self) -> str: ...
    @property
    def data(self) -> dict[str, Any]: ...


class Entry(NamedTuple):
    """A record that was never stored (a pair a caller folds directly); ``seq`` 0, ``time`` ``""``."""

    type: str
    data: dict[str, Any]
    seq: int = 0
    time: str = ""


def entries(pairs: Iterable[Pair]) -> list[Entry]:
    return [Entry(t, d) for t, d in pairs]


def _default_malformed(where: Path | str, rec: StreamRecord, exc: Exception) -> Exception:
    if isinstance(exc, OpenFunctionsError):
        return exc
    return RecordMalformed(f"record seq {rec.seq} ({rec.type!r}) in {str(where)!r} cannot be folded: "
                           f"{type(exc).__name__}: {exc}", details={"where": str(where), "seq": rec.seq,
                                                                    "type": rec.type})


class RecordStream(Generic[S]):
    """One stream's definition.

    ``name``: for messages and docs. ``kind``: the journal header's kind of its file. ``meta``: a new
    file's header meta (the stream's format name and version). ``types``: the record types ``apply``
    folds. ``new_state()``: the state of an empty stream. ``apply(state, record)``: the one fold.
    ``unknown``: :class:`UnknownRecords`. ``snapshot(state)``: the records that re-create ``state`` (what
    a compaction writes when its caller gives none). ``malformed(where, record, exc)``: the stream's own
    error for a record ``apply`` raised ``KeyError``/``TypeError``/``ValueError`` on (or for an unknown
    type it refuses). ``keep_segments``: a compaction leaves the files it superseded in place (history)
    instead of deleting them.
    """

    def __init__(
        self, name: str, *, kind: str, types: Iterable[str], new_state: Callable[[], S],
        apply: Callable[[S, StreamRecord], None], unknown: UnknownRecords,
        meta: dict[str, Any] | None = None, snapshot: Callable[[S], list[Pair]] | None = None,
        malformed: Callable[[Path | str, StreamRecord, Exception], Exception] | None = None,
        keep_segments: bool = False,
    ) -> None:
        self.name = name
        self.kind = kind
        self.types = frozenset(types)
        if COMPACTED in self.types:
            raise ValueError(f"{COMPACTED!r} is the compaction's record, not a stream's own type")
        self.new_state = new_state
        self._apply = apply
        self.unknown = unknown
        self.meta = dict(meta or {})
        self._snapshot = snapshot
        self._malformed = malformed or _default_malformed
        self.keep_segments = keep_segments

    def apply(self, state: S, rec: StreamRecord, where: Path | str = "") -> bool:
        """Fold one record into ``state``. ``True``: folded (or the compaction marker); ``False``: a type
        this stream does not know, kept unfolded (``KEEP``). Raises the stream's ``malformed`` error."""
        if rec.type in self.types:
            try:
                self._apply(state, rec)
            except (KeyError, TypeError, ValueError) as exc:
                raise self._malformed(where, rec, exc) from None
            return True
        if rec.type == COMPACTED:
            return True
        if self.unknown is UnknownRecords.KEEP:
            return False
        raise self._malformed(where, rec, UnknownRecordType(
            f"unknown record type {rec.type!r} (written by a newer version?)",
            details={"type": rec.type, "seq": rec.seq, "stream": self.name}))

    def fold(self, records: Iterable[StreamRecord], state: S | None = None, *, where: Path | str = "",
             unknown: list[StreamRecord] | None = None) -> S:
        """Fold ``records`` in order into ``state`` (default: a new one). ``unknown`` collects what ``KEEP`` kept."""
        out = self.new_state() if state is None else state
        for rec in records:
            if not self.apply(out, rec, where) and unknown is not None:
                unknown.append(rec)
        return out

    def snapshot(self, state: S) -> list[Pair]:
        if self._snapshot is None:
            raise RecordStreamError(f"the {self.name} stream has no snapshot: its caller gives the records to keep")
        return self._snapshot(state)

    def __repr__(self) -> str:
        return f"<RecordStream {self.name} kind={self.kind!r} unknown={self.unknown.value}>"


class Compaction(NamedTuple):
    """What one compaction did: the records it wrote and the files (or rows) it superseded."""

    written: int
    segments: tuple[str, ...]
    info: dict[str, Any]


def marker(segments: Sequence[str], info: dict[str, Any]) -> Pair:
    return COMPACTED, {**info, "segments": list(segments)}


__all__ = ["COMPACTED", "Compaction", "Entry", "Pair", "RecordMalformed", "RecordStream", "RecordStreamError",
           "StreamRecord", "UnknownRecordType", "UnknownRecords", "entries", "marker"]
