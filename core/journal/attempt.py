"""WorkAttemptJournal: the durable record of one work attempt.

The same store as every journal (:class:`JournalLog`, kind ``"attempt"``);
the work controller defines the record types and their ``data``. The header's
``meta`` carries ``{"attempt_id": …}`` when given, and reopening with a
different attempt id is refused (:class:`JournalMismatch`), so one attempt's
evidence never lands in another's file. Use :func:`attempt_journal_path` to
place a journal under a directory: an id never becomes a path unhashed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Iterator

from ._record import Record
from .errors import JournalMismatch
from .log import JournalLog

KIND = "attempt"


def attempt_journal_path(root: str | os.PathLike[str], attempt_id: str) -> Path:
    """``root/<sha256(attempt_id)[:32]>.jsonl``: a safe file name for any id."""
    return Path(root) / (hashlib.sha256(attempt_id.encode("utf-8")).hexdigest()[:32] + ".jsonl")


class WorkAttemptJournal:
    """Attempt-scoped records on one locked, recovered journal file."""

    def __init__(self, log: JournalLog) -> None:
        self.log = log

    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], *, attempt_id: str | None = None, meta: dict[str, Any] | None = None
    ) -> WorkAttemptJournal:
        header_meta = dict(meta or {})
        if attempt_id is not None:
            header_meta["attempt_id"] = attempt_id
        log = await JournalLog.open(path, kind=KIND, meta=header_meta)
        stored = log.header.meta.get("attempt_id")
        if attempt_id is not None and stored is not None and stored != attempt_id:
            await log.close()
            raise JournalMismatch(
                f"journal {str(log.path)!r} belongs to attempt {stored!r}, not {attempt_id!r}",
                details={"path": str(log.path), "attempt_id": stored, "wanted": attempt_id},
            )
        return cls(log)

    @property
    def path(self) -> Path:
        return self.log.path

    @property
    def attempt_id(self) -> str | None:
        return self.log.header.meta.get("attempt_id")

    @property
    def last_seq(self) -> int:
        return self.log.last_seq

    async def append(self, type: str, data: dict[str, Any]) -> Record:
        """Append one record; returns once it is durable (see :meth:`JournalLog.append`)."""
        return await self.log.append(type, data)

    def records(self, *, after_seq: int = 0) -> Iterator[Record]:
        return self.log.records(after_seq=after_seq)

    async def close(self) -> None:
        await self.log.close()

    async def __aenter__(self) -> WorkAttemptJournal:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["WorkAttemptJournal", "attempt_journal_path"]
