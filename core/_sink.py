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

**Ordered receipts** (opt-in, a property the sink declares): a sink whose
``ordered_receipts`` is ``True`` promises that it puts every record in ONE
order and makes them durable in that order (the file journal: one file, one
writer, fail-stop), and accepts ``on_settled(receipt, queued=callback)``: it
calls ``queued()`` once the receipt holds its place in that order, before it
is durable (at most once; not at all if it fails before that). The executor
then releases the call's reservation (a write's exclusive one, a read's
shared slot) at ``queued()`` instead of after ``on_settled`` returns, so the
next write's start record can share the receipt's fsync and the next reads
run meanwhile. Why no promise is lost (docs/formats/receipt.md, "When the
reservation is released"): the next write's handler runs only after its own
start is durable, and that start is behind this receipt in the same order;
this call's reply still waits for its own receipt. Only the executor's sole
sink may use it: with several (``FanoutSink``, e.g. the work controller's
observer after the journal) the observers must see the outcome before the
reservation is released, so a fan-out never declares it. A pooled sink
(PostgreSQL, several connections) keeps no single order and must not declare it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from ._receipts import Receipt, StartRecord


@runtime_checkable
class ExecutionObserver(Protocol):
    async def on_start(self, record: StartRecord) -> None: ...

    async def on_settled(self, receipt: Receipt) -> None: ...


def ordered_receipts(sink: Any) -> bool:
    """Whether ``sink`` declared ordered receipts (see the module doc)."""
    return getattr(sink, "ordered_receipts", False) is True


QueuedCallback = Callable[[], None]


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

    # Never ordered: the observers after the first sink must run before the reservation is released.
    ordered_receipts = False

    def __init__(self, *sinks: ExecutionObserver) -> None:
        self.sinks = list(sinks)

    async def on_start(self, record: StartRecord) -> None:
        for s in self.sinks:
            await s.on_start(record)

    async def on_settled(self, receipt: Receipt) -> None:
        for s in self.sinks:
            await s.on_settled(receipt)


__all__ = ["ExecutionObserver", "MemoryJournalSink", "FanoutSink", "QueuedCallback", "ordered_receipts"]
