"""ExecutionJournal: the executor's durable sink (``ExecutionObserver``).

Record types written (kind ``"execution"`` journal, format in ``_encoder.py``):

- ``"start"``: ``data`` is the :class:`StartRecord` (``v``, ``receipt_id``,
  ``tool``, ``spec_sha256``, ``params_sha256``, ``started_at``,
  ``principal``, ``parent_receipt_id``), appended before the handler is
  entered. If the append fails the executor never enters the handler. Not
  written for a tool whose capability declares ``effect: "read"``
  (``StartRecord.read_only``): a read has no effect to have intended, so a
  crash mid-call leaves nothing to recover (docs/formats/receipt.md).
- ``"receipt"``: ``data`` is the canonical :class:`Receipt`, appended before
  the result is delivered.

Recovery on open reads evidence only; it never dispatches a tool. A
``start`` with no ``receipt`` for the same ``receipt_id`` means the process
ended while the handler may have run: open writes one receipt for it with
``outcome: "unknown"``, ``certainty: "unknown"``, ``handler_started: true``,
``recovered: true``, ``error.code: "recovered_unknown"`` and
``duration_ms: 0`` (the real duration is unknowable). The call is never
retried. Because that receipt settles the start, a second open finds
nothing to recover (idempotent). Memory during recovery is proportional to
the calls in flight at the crash, not to the file.

Segments: a journal only grows, and every open reads all of it. So when,
after recovery, the file is larger than ``rotate_over`` bytes (default
:data:`DEFAULT_ROTATE_BYTES`), open closes it as a segment
(``<path>.seg-000001``, …; see :meth:`JournalLog.rotate`) and continues in a
fresh file. At that moment every start has its receipt, so a later recovery
never needs an older segment; :meth:`ExecutionJournal.receipts` still reads
them all. Segments are never deleted by this code: prune them as you would
old logs.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .._receipts import Receipt, ReceiptError, StartRecord
from .._stamps import utc_timestamp
from ._log import JournalLog, read_records, segment_paths
from ._record import Record

KIND = "execution"
START = "start"
RECEIPT = "receipt"
RECOVERED_CODE = "recovered_unknown"
#: Past this size (after recovery) an open starts a new segment: ~64 MiB is
#: about 130,000 records, which recover in well under a second.
DEFAULT_ROTATE_BYTES = 64 * 2**20


def recovered_receipt(start: dict[str, Any]) -> Receipt:
    """The ``unknown`` receipt recovery writes for a start that never settled."""
    return Receipt(
        receipt_id=start["receipt_id"],
        tool=start["tool"],
        spec_sha256=start.get("spec_sha256"),
        params_sha256=start.get("params_sha256"),
        outcome="unknown",
        certainty="unknown",
        handler_started=True,
        started_at=start["started_at"],
        finished_at=utc_timestamp(),
        duration_ms=0.0,
        error=ReceiptError(
            code=RECOVERED_CODE,
            message="the process ended after the handler started and before the call settled; "
            "whether its effect happened is unknown, and it was not retried",
        ),
        principal=start.get("principal"),
        parent_receipt_id=start.get("parent_receipt_id"),
        recovered=True,
    )


class ExecutionJournal:
    """Starts and receipts of executed calls; plug into ``ToolRegistry(sink=...)``."""

    def __init__(self, log: JournalLog) -> None:
        self.log = log
        #: Receipts written by recovery during this open (empty if nothing was in flight).
        self.recovered: list[Receipt] = []
        #: The segment this open closed, if the file had outgrown ``rotate_over``.
        self.rotated_to: Path | None = None

    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], *, rotate_over: int | None = DEFAULT_ROTATE_BYTES
    ) -> ExecutionJournal:
        """Open (creating if absent), lock and recover; ``rotate_over=None`` never rotates."""
        # One pass: the recovery scan also collects starts without receipts.
        open_starts: dict[str, dict[str, Any]] = {}

        def see(rec: Record) -> None:
            rid = rec.data.get("receipt_id")
            if rec.type == START and isinstance(rid, str):
                open_starts[rid] = rec.data
            elif rec.type == RECEIPT and isinstance(rid, str):
                open_starts.pop(rid, None)

        log = await JournalLog.open(path, kind=KIND, on_record=see, preallocate=True)
        self = cls(log)
        try:
            await self._recover(open_starts)
            if rotate_over is not None and log.size > rotate_over:
                self.rotated_to = await log.rotate()
        except BaseException:
            await log.close()
            raise
        return self

    async def _recover(self, open_starts: dict[str, dict[str, Any]]) -> None:
        # One group, one fsync, however many calls were in flight at the crash.
        receipts = [recovered_receipt(start) for start in open_starts.values()]
        await self.log.append_many([(RECEIPT, r.to_dict()) for r in receipts])
        self.recovered = receipts

    @property
    def path(self) -> Path:
        return self.log.path

    # -- ExecutionObserver ---------------------------------------------
    async def on_start(self, record: StartRecord) -> None:
        if record.read_only:
            return
        await self.log.append(START, record.to_dict())

    #: One file, one writer, fail-stop: records become durable in append order
    #: (``ExecutionObserver`` "ordered receipts": the executor may release a
    #: call's reservation once its receipt is queued; docs/formats/receipt.md).
    ordered_receipts = True

    async def on_settled(self, receipt: Receipt, *, queued: Callable[[], None] | None = None) -> None:
        # Pre-encoded and memoized on the receipt: the reply reuses the same text.
        await self.log.append_encoded(RECEIPT, receipt.canonical_json(), queued=queued)

    # -- reading -------------------------------------------------------------
    def receipts(self) -> Iterator[Receipt]:
        """Stream every persisted receipt, in journal order (finished segments first)."""
        segments = (read_records(s) for s in segment_paths(self.log.path))
        for rec in itertools.chain(*segments, self.log.records()):
            if rec.type == RECEIPT:
                yield Receipt.model_validate(rec.data)

    async def close(self) -> None:
        await self.log.close()

    async def __aenter__(self) -> ExecutionJournal:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["DEFAULT_ROTATE_BYTES", "ExecutionJournal", "recovered_receipt"]
