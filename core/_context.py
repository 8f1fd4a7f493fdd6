"""The trusted execution context a host hands to the executor.

Tool arguments never establish identity, scope, grant validity or lease
custody: those come only from this context, which the host (MCP server,
work controller, test) builds from its own configuration or transport
authentication.

What a host lends a call travels in typed, optional slots (``None`` when the
host has none), never under string keys in ``metadata`` (user data only):

- ``host`` (:class:`HostChannel`): the connected MCP host's model
  (``await ctx.host.sample(params)``), its declared sampling capability and
  the deadline of each request; set by the MCP server, which builds the
  sampler only when a handler reads it;
- ``task`` (:class:`TaskChannel`): the durable-task handle of a call that may
  run as a task (``await ctx.task.escalate()``);
- ``request``: the SDK's raw ``ServerRequestContext`` (logging, elicitation);
- ``run_id``: the agent run this call belongs to;
- ``work`` (:class:`WorkGrant`): what a work attempt's step may touch;
- ``admitted_for`` / ``run_reads_only``: scheduler bookkeeping of a run served
  as a tool (``openfunctions.workflows.begin_run`` / ``child_context``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ._scheduler import Reservation

ProgressReporter = Callable[[float, float | None, str | None], Awaitable[None]]
#: Sends one ``sampling/createMessage`` (wire-form params dict, camelCase) and returns the wire-form result.
Sampler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class HostChannel:
    """The connected MCP host's model for one call: ``ctx.host`` (``None`` when the call did not come over MCP).

    ``sampling``: the client's declared ``sampling`` capability as a dict
    (``{"tools": {}}`` = sampling with tools), ``None`` when it declared none;
    ``sampling_timeout_s``: the host's deadline for each request (``None``: the
    caller's default). ``await sample(params)`` sends one request. A server may
    subclass it to build the capability and sampler lazily (on first use).
    """

    __slots__ = ("_sampler", "_sampling", "sampling_timeout_s")

    def __init__(self, sampler: Sampler, sampling: Mapping[str, Any] | None = None, *,
                 sampling_timeout_s: float | None = None) -> None:
        self._sampler = sampler
        self._sampling = sampling
        self.sampling_timeout_s = sampling_timeout_s

    @property
    def sampling(self) -> Mapping[str, Any] | None:
        return self._sampling

    @property
    def sampler(self) -> Sampler:
        return self._sampler

    async def sample(self, params: dict[str, Any]) -> dict[str, Any]:
        """Send one ``sampling/createMessage`` (wire-form params) to the host; its wire-form result."""
        return await self.sampler(params)

    def with_sampler(self, sampler: Sampler) -> HostChannel:
        """The same host, its requests sent through ``sampler`` (e.g. as input-required results)."""
        return HostChannel(sampler, self.sampling, sampling_timeout_s=self.sampling_timeout_s)


@runtime_checkable
class TaskChannel(Protocol):
    """``ctx.task``: the handle of a call that may run as a durable MCP task (``servers.TaskHandle``)."""

    @property
    def task_id(self) -> str | None: ...

    async def escalate(self) -> str: ...

    async def request_input(self, requests: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]: ...

    async def set_message(self, message: str) -> None: ...


@dataclass(frozen=True)
class WorkGrant:
    """``ctx.work``: what a work attempt's step call may touch, set by the work controller.

    ``granted_paths``: the path patterns the step re-checks right before it
    writes (``None``: no grant, so a writing step refuses); ``artifact_scope``:
    the scope its stored output belongs to (the attempt); ``on_spawn(pid)``:
    journals a command's process group as soon as it exists.
    """

    attempt_id: str | None = None
    operation_id: str | None = None
    granted_paths: tuple[str, ...] | None = None
    artifact_scope: str | None = None
    on_spawn: Callable[[int], Awaitable[None]] | None = None


@dataclass(frozen=True, init=False)
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
    # Typed slots (see the module doc): None unless a host, runtime or controller lends one.
    host: HostChannel | None = field(default=None, repr=False)
    task: TaskChannel | None = field(default=None, repr=False)
    request: Any = field(default=None, repr=False)
    run_id: str | None = None
    work: WorkGrant | None = field(default=None, repr=False)
    admitted_for: str | None = None
    run_reads_only: bool = False

    # A hand-written __init__: a frozen dataclass's own sets each of these 17 fields through
    # object.__setattr__, which costs every MCP call about as much as the rest of building its context.
    def __init__(
        self,
        principal: str | None = None,
        scopes: frozenset[str] = frozenset(),
        grants: tuple[Any, ...] = (),
        lease: Any = None,
        request_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressReporter | None = None,
        receipt_id: str | None = None,
        parent_receipt_id: str | None = None,
        reservation: Reservation | None = None,
        host: HostChannel | None = None,
        task: TaskChannel | None = None,
        request: Any = None,
        run_id: str | None = None,
        work: WorkGrant | None = None,
        admitted_for: str | None = None,
        run_reads_only: bool = False,
    ) -> None:
        self.__dict__.update(
            principal=principal, scopes=scopes, grants=grants, lease=lease, request_id=request_id,
            metadata={} if metadata is None else metadata, progress=progress, receipt_id=receipt_id,
            parent_receipt_id=parent_receipt_id, reservation=reservation, host=host, task=task, request=request,
            run_id=run_id, work=work, admitted_for=admitted_for, run_reads_only=run_reads_only,
        )

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


__all__ = ["HostChannel", "ProgressReporter", "Sampler", "TaskChannel", "ToolExecutionContext", "WorkGrant", "with_child_execution"]
