"""``ExecutionObserver``: what the executor tells about every admitted call.

The durable execution journal is one observer (the first, when there is one);
the work controller's settled-call observer is another. The name says
observer, not journal, because not every one of them persists anything.

``on_start`` runs after admission and before the handler is entered; if it
raises, the handler is never entered (a known, not-started rejection).
``on_settled`` runs once per admitted call with the final receipt, before
the scheduler releases the call's reservation — also after a journal or
pipeline failure — so an observer (the work controller) can block queued
effects the moment an outcome becomes uncertain. If ``on_settled`` raises,
the receipt was not persisted: the caller gets ``ReceiptPersistenceFailed``
and certainty ``unknown``.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ._receipts import Receipt, StartRecord


@runtime_checkable
class ExecutionObserver(Protocol):
    async def on_start(self, record: StartRecord) -> None: ...

    async def on_settled(self, receipt: Receipt) -> None: ...


class MemoryJournalSink:
    """Keeps starts and receipts in memory: for tests and for ``--no-journal`` observers."""

    def __init__(self) -> None:
        self.starts: list[StartRecord] = []
        self.receipts: list[Receipt] = []

    async def on_start(self, record: StartRecord) -> None:
        self.starts.append(record)

    async def on_settled(self, receipt: Receipt) -> None:
        self.receipts.append(receipt)


class FanoutSink:
    """Several sinks in order; the first failure propagates (later sinks do not run)."""

    def __init__(self, *sinks: ExecutionObserver) -> None:
        self.sinks = list(sinks)

    async def on_start(self, record: StartRecord) -> None:
        for s in self.sinks:
            await s.on_start(record)

    async def on_settled(self, receipt: Receipt) -> None:
        for s in self.sinks:
            await s.on_settled(receipt)


__all__ = ["ExecutionObserver", "MemoryJournalSink", "FanoutSink"]
