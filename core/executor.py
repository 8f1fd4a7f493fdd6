"""The executor: the one pipeline every tool call goes through.

Stages, in order (each a method below, named for the stage):

1. ``_capture``        params snapshot (canonical JSON) and spec digest
2. ``_validate``       params against the input schema's dialect
3. ``_resolve_policy`` policy decision from the trusted context
4. ``_admit``          scheduler admission under the tool's admission for these params
                       (mode and conflict keys: ``ToolDefinition.admission``), then the
                       cross-replica ``key_locks`` for a call with keys; or a child's
                       inherited reservation, when the child fits inside it
5. ``_persist_start``  journal sink ``on_start`` (when configured; the durable
                       journal writes nothing for a tool declared ``effect: "read"``)
6. ``_invoke``         the handler, with the trusted context
7. ``_normalize``      the result, once
8. ``_check_output``   structured payload against the output schema
9. ``_persist_receipt`` journal sink ``on_settled``, before the reservation is released
                       (a sole sink with ordered receipts: once the receipt is queued, see below)
10. ``_deliver``       the :class:`DetailedResult`

Certainty: anything refused before stage 6 is ``known`` (nothing ran).
From stage 6 on, a raise, an invalid output or a failed persistence leaves
the effect ``unknown``. Any exception in any stage, ours or not (a
validator's ``RecursionError``, a result too large to print), settles the
call the same way: a receipt, the reservation released, the start record
(if one was written) settled. Persistence runs shielded from cancellation, so a
call that settled is recorded even if its caller was cancelled meanwhile.

When the reservation is released: after the receipt is durable, except
with a sole sink that declares ``ordered_receipts`` (the file journal): then
as soon as the receipt is *queued* in that sink's single order. The next
write admitted meanwhile cannot enter its handler before its own start
record is durable, and that record is behind this receipt, so this receipt
is durable first; this call's reply still waits for its own receipt; a
read's reply waits for its receipt, also behind. So a write still runs alone
(handlers never overlap) and no reply is sent for a receipt that is not
durable, while consecutive writes share fsyncs (docs/formats/receipt.md).
Cross-replica key locks (``key_locks``) are kept until the receipt is
durable even then: the journal's order binds only this process's writers.
A read's shared slot is released the same way: held until
durable, the default 8 slots capped a server at 8 calls per fsync round
trip, which at 200 HTTP clients left the loop idle between fsyncs.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from ._canonical import canonical_json, sha256_hex, to_utf8
from ._context import ToolExecutionContext
from ._policy import Mode, Policy, PolicyDecision
from ._receipts import (
    RECEIPT_VERSION,
    Certainty,
    Outcome,
    PolicyRecord,
    Receipt,
    ReceiptError,
    StartRecord,
    fast_construct,
)
from ._result import DetailedResult, ToolResult, normalize
from ._scheduler import DEFAULT_MAX_PARALLEL_WRITES, KeyLocks, Reservation, Scheduler
from ._sink import ExecutionObserver, FanoutSink, ordered_receipts
from ._stamps import new_id, utc_timestamp
from ._tool import ToolDefinition
from .errors import (
    ConfigurationError,
    ExecutionCancelled,
    ExecutionStageFailed,
    InvalidParams,
    KeyLocksFailed,
    OpenFunctionsError,
    PolicyDenied,
    ReceiptPersistenceFailed,
    ToolError,
    ToolFailed,
)

log = structlog.get_logger("openfunctions.executor")

_EMPTY_CTX = ToolExecutionContext()
_NO_SCOPE = contextlib.nullcontext()  # stateless: one instance serves every call


@dataclass
class _Call:
    """Everything the pipeline learns about one call, stage by stage."""

    tool: ToolDefinition
    ctx: ToolExecutionContext
    receipt_id: str
    started_at: str
    t0: float
    params: dict[str, Any] | None = None
    params_sha256: str | None = None
    decision: PolicyDecision | None = None
    reservation: Reservation | None = None
    owns_reservation: bool = False
    key_release: Callable[[], None] | None = None  # key locks kept past the local slot (_release_local)
    handler_started: bool = False
    value: Any = None
    result: ToolResult | None = None
    result_sha256: str | None = None
    on_settled: Callable[[DetailedResult], None] | None = None


class ToolExecutor:
    """Runs tools through the pipeline. Shared by a registry and all its projections."""

    def __init__(
        self,
        *,
        policy: Policy | None = None,
        mode: Mode = "local",
        scheduler: Scheduler | None = None,
        sink: ExecutionObserver | None = None,
        max_parallel: int = 8,
        max_parallel_writes: int = DEFAULT_MAX_PARALLEL_WRITES,
        key_locks: KeyLocks | None = None,
    ) -> None:
        if mode not in ("local", "governed"):
            raise ConfigurationError(f"unknown executor mode {mode!r}: use 'local' or 'governed'")
        if mode == "governed" and policy is None:
            raise ConfigurationError("governed mode cannot be constructed without a policy")
        self.mode = mode
        self.policy = policy
        self.scheduler = scheduler or Scheduler(max_parallel, max_parallel_writes)
        #: Cross-replica conflict keys (e.g. PostgreSQL advisory locks), taken after local
        #: admission for a call with keys; ``None``: keys hold within this process only.
        self.key_locks: KeyLocks | None = key_locks
        self._sinks: list[ExecutionObserver] = []
        self._sink: ExecutionObserver | None = None  # what the pipeline calls
        self.sink = sink

    # -- sinks ----------------------------------------------------------------

    @property
    def sink(self) -> ExecutionObserver | None:
        """The sink the pipeline writes to: ``None``, the one sink, or a
        :class:`FanoutSink` of several (in order). Assigning replaces them all."""
        return self._sink

    @sink.setter
    def sink(self, sink: ExecutionObserver | None) -> None:
        self._sinks = [] if sink is None else [sink]
        self._sink = sink
        self._ordered = ordered_receipts(sink)

    def add_sink(self, sink: ExecutionObserver, *, first: bool = False) -> None:
        """Add ``sink`` after the others (``first=True``: before them).

        Order matters: sinks run in order and the first failure stops the
        rest, so a durable journal goes first and observers after it. The
        server (its execution journal, first) and the work controller (its
        settled-call observer) add and remove theirs independently.
        """
        if first:
            self._sinks.insert(0, sink)
        else:
            self._sinks.append(sink)
        self._compose()

    def remove_sink(self, sink: ExecutionObserver) -> bool:
        """Remove ``sink`` (by identity); returns whether it was there."""
        for i, s in enumerate(self._sinks):
            if s is sink:
                del self._sinks[i]
                self._compose()
                return True
        return False

    def _compose(self) -> None:
        sinks = self._sinks
        self._sink = None if not sinks else sinks[0] if len(sinks) == 1 else FanoutSink(*sinks)
        self._ordered = ordered_receipts(self._sink)

    # -- the pipeline -----------------------------------------------------

    async def execute_detailed(
        self, tool: ToolDefinition, params: Any, context: ToolExecutionContext | None = None, *,
        receipt_id: str | None = None, on_settled: Callable[[DetailedResult], None] | None = None,
    ) -> DetailedResult:
        """Run ``tool`` through the pipeline. ``receipt_id``: an id the caller
        assigned beforehand (a task names its receipt before the handler runs);
        by default a fresh one.

        ``on_settled(detailed)``: called once the call settled (its receipt
        persisted), with what this method returns, and also when the call is
        cancelled, just before the cancellation propagates: a host that
        cancelled a call itself (a shutdown) can still answer it with its receipt.
        """
        call = self._capture_identity(tool, context or _EMPTY_CTX, receipt_id)
        call.on_settled = on_settled
        cancelled_exc = anyio.get_cancelled_exc_class()
        stage = "capture"
        try:
            self._capture(call, params)
            stage = "validate"
            self._validate(call)
            stage = "resolve_policy"
            await self._resolve_policy(call)
        except OpenFunctionsError as exc:
            return await self._settle(call, "rejected", "known", exc)
        except cancelled_exc:  # an awaited policy decision: nothing ran
            await self._settle(call, "cancelled", "known", ExecutionCancelled("cancelled before admission"))
            raise
        except Exception as exc:  # not ours (a validator's RecursionError...): still refused, with a receipt
            return await self._settle(call, "rejected", "known", _stage_error(call, stage, exc))
        try:
            await self._admit(call)
        except cancelled_exc:
            await self._settle(call, "cancelled", "known", ExecutionCancelled("cancelled while queued for admission"))
            raise
        except OpenFunctionsError as exc:
            outcome: Outcome = "cancelled" if isinstance(exc, ExecutionCancelled) else "rejected"
            return await self._settle(call, outcome, "known", exc)
        except Exception as exc:
            return await self._settle(call, "rejected", "known", _stage_error(call, "admit", exc))
        # From here on the reservation is held; _settle releases it after on_settled.
        try:
            await self._persist_start(call)
        except cancelled_exc:  # the handler never ran (a start written meanwhile is settled by this receipt)
            await self._settle(call, "cancelled", "known", ExecutionCancelled("cancelled while its start record was written"))
            raise
        except OpenFunctionsError as exc:
            return await self._settle(call, "rejected", "known", exc)
        except Exception as exc:  # a sink bug is still a refusal: the handler never ran
            return await self._settle(call, "rejected", "known", _journal_error("start", exc))
        try:
            await self._invoke(call)
        except cancelled_exc:
            await self._settle(call, "cancelled", "unknown", ExecutionCancelled(f"tool {tool.name!r} was cancelled while running"))
            raise
        except ToolError as exc:
            if exc.refused:  # turned down by the handler before it did anything
                return await self._settle(call, "rejected", "known", exc)
            certainty: Certainty = "known" if exc.effect_happened is False else "unknown"
            return await self._settle(call, "failed", certainty, exc)
        except Exception as exc:
            err = ToolFailed(
                f"tool {tool.name!r} raised {type(exc).__name__}: {exc}",
                details={"exception": type(exc).__name__},
            )
            log.warning("tool_raised", tool=tool.name, receipt_id=call.receipt_id, exception=type(exc).__name__, exc_info=exc)
            return await self._settle(call, "failed", "unknown", err)
        stage = "normalize"
        try:
            self._normalize(call)
            stage = "check_output"
            self._check_output(call)
        except OpenFunctionsError as exc:
            return await self._settle(call, "failed", "unknown", exc)
        except Exception as exc:  # e.g. a dangling $ref in the output schema, an int too long to print
            call.result = call.result_sha256 = None
            return await self._settle(call, "failed", "unknown", _stage_error(call, stage, exc))
        return await self._settle(call, "succeeded", "known", None)

    def _capture_identity(self, tool: ToolDefinition, ctx: ToolExecutionContext, receipt_id: str | None = None) -> _Call:
        return _Call(tool=tool, ctx=ctx, receipt_id=receipt_id or new_id("rcpt"), started_at=utc_timestamp(), t0=time.perf_counter())

    def _capture(self, call: _Call, params: Any) -> None:
        if params is None:
            params = {}
        text = canonical_json(params)  # raises NonJsonValue naming the path
        call.params_sha256 = "sha256:" + sha256_hex(to_utf8(text, params))
        if not isinstance(params, dict):
            raise InvalidParams(
                f"arguments for tool {call.tool.name!r} must be a JSON object, got {type(params).__name__}",
                details={"violations": [{"path": "$", "message": "not an object"}], "violation_count": 1},
            )
        # The handler gets a private snapshot: the caller cannot mutate it
        # after the digest was taken, and tuples etc. become plain JSON.
        call.params = json.loads(text)

    def _validate(self, call: _Call) -> None:
        if call.params is not None:  # null for an optional parameter means "absent" (ToolDefinition.null_as_absent)
            call.params = call.tool.drop_absent_nulls(call.params)
        call.tool.input_validator.check_params(call.tool.name, call.params)

    async def _resolve_policy(self, call: _Call) -> None:
        tool, ctx = call.tool, call.ctx
        requires = tool.capability is not None and tool.capability.requires_authority
        if self.policy is None:
            if requires:
                call.decision = PolicyDecision(False, "local", "no policy configured")
                raise PolicyDenied(
                    f"tool {tool.name!r} requires authority (scopes {list(tool.capability.required_scopes)}) "  # type: ignore[union-attr]
                    "and no policy validated the binding; configure a policy"
                )
            return
        decision = await self.policy.decide(tool, call.params or {}, ctx)
        call.decision = decision
        if not decision.allowed:
            raise PolicyDenied(decision.reason or f"policy {decision.policy!r} denied tool {tool.name!r}")
        if requires and not decision.binding_validated:
            raise PolicyDenied(
                f"tool {tool.name!r} requires authority and policy {decision.policy!r} did not validate the binding"
            )

    async def _admit(self, call: _Call) -> None:
        tool = call.tool
        adm = tool._fixed_admission  # every call of a tool without keys: no per-call work
        if adm is None:
            adm = tool.admission(call.params or {})  # raises ConflictKeysInvalid
        parent = call.ctx.reservation
        if call.ctx.parent_receipt_id is not None and parent is not None:
            parent.admits_child(adm.mode, adm.keys)  # raises AdmissionRefused
            call.reservation = parent
            return
        call.reservation = r = await self.scheduler.acquire(adm.mode, adm.keys)
        call.owns_reservation = True
        # Across replicas: keys only (a registry-wide barrier is per process). Taken after the
        # local slot, so one replica's waiters queue locally and only their turn reaches the lock.
        if adm.keys and self.key_locks is not None:
            try:
                release = await self.key_locks.acquire(adm.keys, shared=adm.mode == "shared")
            except OpenFunctionsError:
                raise
            except Exception as exc:  # the cancellation class is a BaseException under asyncio and trio: it passes
                raise KeyLocksFailed(
                    f"tool {call.tool.name!r}: the cross-replica key locks failed: {type(exc).__name__}: {str(exc)[:200]}",
                    details={"keys": sorted(adm.keys), "cause": type(exc).__name__},
                ) from None
            if r.released:  # cannot happen today; never leave a lock behind if it did
                release()
            else:
                r.key_release = release

    async def _persist_start(self, call: _Call) -> None:
        if self._sink is None:
            return
        cap = call.tool.capability
        await self._sink.on_start(
            fast_construct(StartRecord, dict(
                v=RECEIPT_VERSION,
                receipt_id=call.receipt_id,
                tool=call.tool.name,
                spec_sha256=call.tool.spec_sha256,
                params_sha256=call.params_sha256 or "",
                started_at=call.started_at,
                principal=call.ctx.principal,
                parent_receipt_id=call.ctx.parent_receipt_id,
                # A declared read has no effect to have intended: the durable
                # journal skips its start (the receipt is still durable before delivery).
                read_only=cap is not None and cap.effect == "read",
            ))
        )

    async def _invoke(self, call: _Call) -> None:
        ctx = call.ctx.replace(receipt_id=call.receipt_id, reservation=call.reservation)
        call.handler_started = True
        call.value = await call.tool.handler(call.params or {}, ctx)

    def _normalize(self, call: _Call) -> None:
        call.result = normalize(call.value)
        # Digest now, inside the stage: a result with no canonical UTF-8 form
        # must fail here (failed/unknown), not later while writing the receipt.
        call.result_sha256 = call.result.digest()

    def _check_output(self, call: _Call) -> None:
        v = call.tool.output_validator
        assert call.result is not None
        if v is None or call.result.is_error:
            return
        if call.result.structured is None:
            from .errors import InvalidOutput

            raise InvalidOutput(
                f"tool {call.tool.name!r} declares an output schema but returned no structured object"
            )
        v.check_output(call.tool.name, call.result.structured)

    async def _persist_receipt(self, call: _Call, receipt: Receipt) -> Receipt | OpenFunctionsError:
        if self._sink is None:
            return receipt
        try:
            # Released once queued (see the module doc): the next write can share this receipt's fsync, and
            # the next reads run while it is written.
            if self._ordered and call.owns_reservation and call.reservation is not None:
                await self._sink.on_settled(receipt, queued=lambda: self._release_local(call))  # type: ignore[call-arg]
            else:
                await self._sink.on_settled(receipt)
        except Exception as exc:
            log.error("receipt_persistence_failed", receipt_id=receipt.receipt_id, tool=receipt.tool, error=str(exc))
            return _journal_error("settled", exc, cls=ReceiptPersistenceFailed)
        return receipt

    async def _settle(
        self, call: _Call, outcome: Outcome, certainty: Certainty, error: OpenFunctionsError | None
    ) -> DetailedResult:
        """Build the receipt, persist it, release the reservation, deliver."""
        # Shield persistence from a late cancellation: a call that settled is
        # recorded. Without a sink nothing here awaits, so no scope is entered
        # at all (entering and leaving an anyio CancelScope costs ~7 us).
        with anyio.CancelScope(shield=True) if self._sink is not None else _NO_SCOPE:
            try:
                result = call.result if error is None else ToolResult.text(error.message, is_error=True)
                if error is None and call.result is not None and call.result.is_error:
                    outcome = "failed"
                receipt = self._receipt(call, outcome, certainty, error, result)
                persisted = await self._persist_receipt(call, receipt)
                if isinstance(persisted, OpenFunctionsError):
                    error = persisted
                    update: dict[str, Any] = {"error": ReceiptError(code=error.code, message=error.message)}
                    if call.handler_started:  # an effect may have happened that nothing durable records
                        update.update(outcome="unknown", certainty="unknown")
                    # else: refused before its handler (e.g. by a failed journal): nothing happened, known.
                    receipt = receipt.model_copy(update=update)
                    result = ToolResult.text(error.message, is_error=True)
            finally:
                self._release(call)
        detailed = self._deliver(call, receipt, result, error)
        if call.on_settled is not None:
            call.on_settled(detailed)
        return detailed

    @staticmethod
    def _release(call: _Call) -> None:
        """Release the call's own reservation and its key locks (idempotent: ``Reservation.release`` is)."""
        if call.owns_reservation and call.reservation is not None:
            call.reservation.release()
        if call.key_release is not None:
            _release_key_locks(call)

    @staticmethod
    def _release_local(call: _Call) -> None:
        """Release the local slot once the receipt is queued, but keep the cross-replica key locks
        until it is durable: the queue's order promises nothing to a writer in another process."""
        r = call.reservation
        if call.owns_reservation and r is not None and not r.released:
            call.key_release, r.key_release = r.key_release, None
            r.release()

    def _receipt(
        self,
        call: _Call,
        outcome: Outcome,
        certainty: Certainty,
        error: OpenFunctionsError | None,
        result: ToolResult | None,
    ) -> Receipt:
        d = call.decision
        return fast_construct(Receipt, dict(
            v=1,
            receipt_id=call.receipt_id,
            tool=call.tool.name,
            spec_sha256=call.tool.spec_sha256,
            params_sha256=call.params_sha256,
            result_sha256=call.result_sha256 if error is None else None,
            outcome=outcome,
            certainty=certainty,
            handler_started=call.handler_started,
            started_at=call.started_at,
            finished_at=utc_timestamp(),
            duration_ms=round((time.perf_counter() - call.t0) * 1000.0, 3),
            error=ReceiptError(code=error.code, message=_utf8_safe(error.message)) if error else None,
            policy=PolicyRecord(policy=d.policy, allowed=d.allowed, reason=d.reason) if d else None,
            principal=call.ctx.principal,
            parent_receipt_id=call.ctx.parent_receipt_id,
            recovered=False,
        ))

    def _deliver(
        self, call: _Call, receipt: Receipt, result: ToolResult | None, error: OpenFunctionsError | None
    ) -> DetailedResult:
        assert result is not None
        return DetailedResult(result=result, receipt=receipt, value=call.value if error is None else None, error=error)


def _release_key_locks(call: _Call) -> None:
    release, call.key_release = call.key_release, None
    if release is None:
        return
    try:
        release()
    except Exception as exc:  # never let a lock's release break the settlement
        log.error("key_locks_release_failed", tool=call.tool.name, receipt_id=call.receipt_id, error=repr(exc))


def _stage_error(call: _Call, stage: str, exc: Exception) -> OpenFunctionsError:
    log.error("executor_stage_raised", tool=call.tool.name, receipt_id=call.receipt_id, stage=stage,
              exception=type(exc).__name__, exc_info=exc)
    try:
        text = str(exc)
    except Exception:  # a str() that raises must not stop the receipt
        text = "<unprintable>"
    return ExecutionStageFailed(
        f"tool {call.tool.name!r}: the {stage} stage raised {type(exc).__name__}: {text[:300]}",
        details={"stage": stage, "exception": type(exc).__name__},
    )


def _utf8_safe(text: str) -> str:
    # An error message may quote caller or handler text; a lone surrogate in
    # it must not make the receipt unwritable.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _journal_error(stage: str, exc: Exception, cls: type[OpenFunctionsError] | None = None) -> OpenFunctionsError:
    if isinstance(exc, OpenFunctionsError) and cls is None:
        return exc
    from .errors import JournalError

    klass = cls or JournalError
    code = getattr(exc, "code", None)
    msg = f"journal failed to persist the {stage} record: {exc}"
    err = klass(msg, details={"cause": code or type(exc).__name__})
    return err


__all__ = ["ToolExecutor"]
