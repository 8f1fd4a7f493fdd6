"""The trusted execution context a host hands to the executor.

Tool arguments never establish identity, scope, grant validity or lease
custody: those come only from this context, which the host (MCP server,
work controller, test) builds from its own configuration or transport
authentication.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._scheduler import Reservation

ProgressReporter = Callable[[float, float | None, str | None], Awaitable[None]]


@dataclass(frozen=True)
class ToolExecutionContext:
    principal: str | None = None
    scopes: frozenset[str] = frozenset()
    grants: tuple[Any, ...] = ()
    lease: Any = None
    request_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    progress: ProgressReporter | None = None
    # Set by the executor for the running call; hosts leave them unset.
    receipt_id: str | None = None
    parent_receipt_id: str | None = None
    reservation: Reservation | None = field(default=None, repr=False)

    async def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        """Report progress to the caller (an MCP ``notifications/progress``); a no-op without a reporter."""
        if self.progress is not None:
            await self.progress(progress, total, message)

    def replace(self, **changes: Any) -> ToolExecutionContext:
        """A copy with ``changes`` (fields only; cheaper than ``dataclasses.replace``)."""
        unknown = set(changes) - _FIELDS
        if unknown:
            raise TypeError(f"ToolExecutionContext has no field(s) {sorted(unknown)}")
        new = object.__new__(ToolExecutionContext)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new


_FIELDS = frozenset(f.name for f in dataclasses.fields(ToolExecutionContext))


def with_child_execution(parent: ToolExecutionContext, *, scopes: frozenset[str] | set[str] | None = None) -> ToolExecutionContext:
    """A context for a trusted delegated call made from inside a running handler.

    The child inherits the parent's scheduler reservation (so it does not
    queue behind its own parent) and authority narrowed to ``scopes`` (the
    intersection with the parent's; never wider). Its receipt links to the
    parent's through ``parent_receipt_id``. The child must fit inside the
    parent's reservation (``Reservation.admits_child``), else its call is
    refused (``AdmissionRefused``, a ``rejected`` receipt): a registry-wide
    barrier's child may run anything; a read's child only reads; a keyed
    write's child only calls whose conflict keys are within the parent's; a
    parallel-safe write (no keys) only keyless reads and parallel-safe
    writes. A context with ``parent_receipt_id`` set and no reservation is
    admitted on its own (it queues like any call).
    """
    if parent.receipt_id is None or parent.reservation is None:
        from .errors import AdmissionRefused

        raise AdmissionRefused("with_child_execution needs the context of a running call (no reservation to inherit)")
    narrowed = parent.scopes if scopes is None else frozenset(scopes) & parent.scopes
    return dataclasses.replace(
        parent,
        scopes=narrowed,
        parent_receipt_id=parent.receipt_id,
        receipt_id=None,
    )


__all__ = ["ToolExecutionContext", "ProgressReporter", "with_child_execution"]
