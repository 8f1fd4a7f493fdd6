"""The controller's executor observer: binds a dispatched call to its operation.

The controller tells it which call it is about to dispatch (:meth:`begin`);
the executor calls :meth:`on_start` after persisting the call's start and
before entering the handler (the controller journals ``dispatched`` there:
an intent without it proves the handler never ran), and :meth:`on_settled`
with the receipt, which :meth:`end` hands back (the receipt of a call that
was cancelled under the controller's feet).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from openfunctions.core import Receipt


class DispatchObserver:
    def __init__(self, on_dispatched: Callable[[str, str, str], Awaitable[None]]) -> None:
        self.on_dispatched = on_dispatched
        self._call: tuple[str, str, str, bool] | None = None
        self._receipt_id: str | None = None
        self._receipt: Receipt | None = None

    def begin(self, attempt_id: str, operation_id: str, tool: str, *, effectful: bool) -> None:
        self._call = (attempt_id, operation_id, tool, effectful)
        self._receipt_id, self._receipt = None, None

    def end(self) -> Receipt | None:
        receipt = self._receipt
        self._call, self._receipt_id, self._receipt = None, None, None
        return receipt

    async def on_start(self, record: Any) -> None:
        c = self._call
        if c is None or record.tool != c[2] or self._receipt_id is not None:
            return
        self._receipt_id = record.receipt_id
        if c[3]:
            await self.on_dispatched(c[0], c[1], record.receipt_id)

    async def on_settled(self, receipt: Receipt) -> None:
        if self._call is not None and receipt.receipt_id == self._receipt_id:
            self._receipt = receipt


__all__ = ["DispatchObserver"]
