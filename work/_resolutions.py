"""The operator's inbox of resolutions: ``<data-dir>/work/resolutions.journal``.

``openfunctions-mcp work resolve OP_ID --as applied|not-applied --reason ...``
appends one ``resolve`` record here (a core journal, kind
``work-resolutions``: write + fsync before it returns, its own flock held
only for the append), also while a server runs. The controller reads the
inbox lock-free and copies each record it has not seen into its attempt
journal as a ``resolution`` record (format: :mod:`openfunctions.work._records`);
only that copy changes state, so the attempt journal alone still rebuilds it.

Record ``resolve`` data: ``{v: 1, operation_id, as ("applied" | "not_applied"),
reason (non-empty, ≤ 2000 chars), by (who), at (RFC 3339 UTC)}``.

The inbox is the core record stream :data:`RESOLUTIONS` (``core.records``): its one
apply folds each ``resolve`` into the list the controller copies from, when the
inbox is read (``replay``) and when a resolution is appended (``FileRecordLog``).
A record of a type this version does not know is **refused** (``UnknownRecords.REFUSE``):
a resolution tells the controller whether an effect happened, so a reader that
skipped a newer writer's record (a resolution taken back, say) could act on what
the operator no longer says. A ``resolve`` that cannot be folded (no operation id,
a verdict that is neither) is refused too. Either way the read fails naming the
record (``record_type_unknown`` / ``record_malformed``), the controller logs
``resolutions_unreadable`` and copies nothing until the inbox reads again, and
``work resolve`` refuses to append to it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio

from openfunctions.core import utc_timestamp
from openfunctions.core.records import (
    FileRecordLog,
    RecordMalformed,
    RecordStream,
    StreamRecord,
    UnknownRecords,
    UnknownRecordType,
    replay,
)

from ._records import RESOLUTIONS_FILE, RESOLUTIONS_KIND

RESOLVE = "resolve"
VERDICTS = ("applied", "not_applied")
MAX_REASON = 2000
_LOCK_WAIT_S = 5.0


def resolve_record(operation_id: str, *, as_: str, reason: str, by: str) -> dict[str, Any]:
    """The ``resolve`` record's data, checked (every inbox backend writes this); bad input -> ``ValueError``."""
    if as_ not in VERDICTS:
        raise ValueError(f"--as must be one of {', '.join(VERDICTS)}")
    reason = (reason or "").strip()
    if not reason:
        raise ValueError("a resolution needs a reason (what the operator checked)")
    return {"v": 1, "operation_id": operation_id, "as": as_, "reason": reason[:MAX_REASON], "by": by, "at": utc_timestamp()}


def valid_resolve(type_: str, data: Any) -> bool:
    """Whether an inbox record is a ``resolve`` the controller may copy (others are skipped)."""
    return type_ == RESOLVE and isinstance(data, dict) and data.get("as") in VERDICTS and isinstance(data.get("operation_id"), str)


#: The inbox's state: every ``resolve`` record as ``(seq, data)``, in seq order.
Inbox = list[tuple[int, dict[str, Any]]]


def _apply(inbox: Inbox, rec: StreamRecord) -> None:
    if not valid_resolve(rec.type, rec.data):
        raise ValueError("a resolve needs a string operation_id and 'as' one of " + ", ".join(VERDICTS))
    inbox.append((rec.seq, rec.data))


def _refused(where: Path | str, rec: StreamRecord, exc: Exception) -> Exception:
    what = exc.message if isinstance(exc, UnknownRecordType) else f"{type(exc).__name__}: {exc}"
    details = {"where": str(where), "seq": rec.seq, "type": rec.type}
    message = f"the resolution inbox {str(where)!r} cannot be read: record seq {rec.seq} ({rec.type!r}): {what}"
    if isinstance(exc, UnknownRecordType):
        return UnknownRecordType(message, details=details)
    return RecordMalformed(message, details=details)


#: The operator's resolutions: one record type, one fold, unknown types refused (see the module docstring).
RESOLUTIONS: RecordStream[Inbox] = RecordStream(
    "work-resolutions", kind=RESOLUTIONS_KIND, types=(RESOLVE,), new_state=list, apply=_apply,
    unknown=UnknownRecords.REFUSE, malformed=_refused)


class ResolutionInbox:
    def __init__(self, work_dir: str | os.PathLike[str]) -> None:
        self.path = Path(work_dir) / RESOLUTIONS_FILE
        self.where = str(self.path)
        self._key: tuple[int, int, int] | None = None
        self._cache: list[tuple[int, dict[str, Any]]] = []

    def unchanged(self) -> bool:
        """True when the inbox is as last read (one stat; cheap enough for the event loop)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return self._key is None
        return (st.st_ino, st.st_size, st.st_mtime_ns) == self._key

    def read(self) -> list[tuple[int, dict[str, Any]]]:
        """Every ``resolve`` record as ``(seq, data)``, folded by :data:`RESOLUTIONS` (lock-free; cached by the
        file's stat). Raises the stream's error for a record it refuses (see the module docstring)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._key, self._cache = None, []
            return []
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key != self._key:
            self._key, self._cache = key, replay(RESOLUTIONS, self.path).state
        return list(self._cache)

    async def resolve(self, operation_id: str, *, as_: str, reason: str, by: str) -> dict[str, Any]:
        """Append one resolution (durable once this returns)."""
        from openfunctions.core.journal import JournalLocked

        data = resolve_record(operation_id, as_=as_, reason=reason, by=by)
        log: FileRecordLog[Inbox] | None = None
        with anyio.move_on_after(_LOCK_WAIT_S):
            while log is None:
                try:
                    log = await FileRecordLog.open(RESOLUTIONS, self.path)
                except JournalLocked:
                    await anyio.sleep(0.05)
        if log is None:
            log = await FileRecordLog.open(RESOLUTIONS, self.path)
        try:
            rec = await log.append(RESOLVE, data)
        finally:
            await log.close()
        return {**data, "seq": rec.seq}


__all__ = ["RESOLUTIONS", "ResolutionInbox", "RESOLVE", "VERDICTS", "resolve_record", "valid_resolve"]
