"""The in-memory shapes of a journal's header and records (see ``_encoder.py`` for the bytes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

FORMAT_NAME = "openfunctions.journal"
VERSION_V1 = 1
VERSION_V2 = 2
CURRENT_VERSION = VERSION_V2
#: The most bytes a writer puts between two fsyncs (a longer line goes alone). Recovery counts on it: NUL bytes
#: inside at most this much data at the end are a torn last write, inside more they are damage
#: (``_decoder.py``, ``_writer.py``).
TORN_WRITE_MAX = 1 << 20


@dataclass(frozen=True, slots=True)
class Header:
    """Line 1 of a journal file. ``salt`` is ``None`` for a v1 header."""

    version: int
    journal_id: str | None
    kind: str | None
    created: str | None
    salt: str | None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "journal_id": self.journal_id,
            "kind": self.kind,
            "created": self.created,
            "salt": self.salt,
            "meta": self.meta,
        }


class Record(NamedTuple):
    """One committed, validated journal record (immutable).

    ``version`` is the record's format (1: no checksum, 2: checksummed and
    chained). ``offset`` and ``line`` locate it in the file (line 1 is the
    header), for error messages and tools. A named tuple rather than a frozen
    dataclass: appends and recovery scans build one per record, and a tuple
    is built in a quarter of the time.
    """

    seq: int
    type: str
    time: str
    data: dict[str, Any]
    checksum: str | None = None
    prev: str | None = None
    version: int = CURRENT_VERSION
    offset: int = -1
    line: int = -1

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seq": self.seq, "type": self.type, "time": self.time, "data": self.data}
        if self.checksum is not None:
            out["chk"] = self.checksum
            out["prev"] = self.prev
        return out


__all__ = ["FORMAT_NAME", "VERSION_V1", "VERSION_V2", "CURRENT_VERSION", "Header", "Record"]
