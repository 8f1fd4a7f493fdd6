"""The work controller: owns one selected attempt and every effect it makes.

It is a bounded state machine, not a model loop. For each lifecycle call
(preview, start, run_step, verify, reconcile, complete, cancel) it checks,
in order, custody (the lease), the attempt's state, authority (the grant
for this principal, step, catalog digest and paths), then records what it
is about to do, does it *through the executor* (so it has a receipt), and
records what happened.

Ordering of one effectful step (the crash-safety argument):

1. intent durable in the attempt journal (operation id, step, input digest,
   lease generation, readback metadata from ``prepare_reconciliation``),
   written under the lease fence;
2. the step's registry tool runs through ``registry.execute_detailed``;
3. the outcome (status + receipt) is durable, again under the fence.

A crash between 1 and 3 leaves an intent without an outcome: recovery marks
that operation ``unknown`` and the attempt ``blocked``; only reconciliation
(a read-only oracle, run through the executor) can resolve it. Nothing is
ever re-run blindly.

Attempt journal format, version 1 (docs/formats/work-attempts.md has the
full table): one core journal segment per lease generation,
``<data-dir>/work/attempts/g<generation:010d>.jsonl`` (kind ``attempt``);
every record is appended under the lease fence and carries
``lease_generation``. Record types and their ``data``:

- ``lease_acquired`` {owner, generation, pid, catalog_digest}
- ``preview_saved`` {preview_id, principal, plan, plan_digest, catalog_digest, artifact_id, created_at}
- ``attempt_started`` {attempt_id, number, preview_id, principal, plan, plan_digest, catalog_digest}
- ``intent`` {attempt_id, operation_id, plan_index, step, params, effect, input_digest, readback}
- ``dispatched`` {attempt_id, operation_id, receipt_id}
- ``outcome`` {attempt_id, operation_id, plan_index, step, effect, params, input_digest, status,
  receipt, result_digest, artifacts, mutation_epoch, cursor, cancelled}
- ``transition`` {attempt_id, from, to, reason?, mutation_epoch?}
- ``verification`` {attempt_id, verificationId, passed, accepted, checks, fingerprintsStable,
  mutation_epoch, proof, proofSummary, artifacts}
- ``reconciliation`` {attempt_id, operation_id, step, verdict, status, evidence, receipt,
  receipt_id, linked_receipt_id, linked_operation_id, mutation_epoch, cursor}
- ``recovered`` {restored, unknown_operations}

Locks: ``_admission`` admits one lifecycle call at a time (the selected
attempt has one writer). ``_lifecycle`` serializes state transitions with
lease renewal, so a renewal can never interleave with a terminal
transition. The renewal lane is its own asyncio task and keeps running
while a long step awaits its subprocess.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from openfunctions.artifacts import find_artifact_ids
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import structlog

from openfunctions.core import (
    canonical_json,
    OpenFunctionsError,
    Receipt,
    ToolExecutionContext,
    ToolRegistry,
    digest,
    new_id,
    utc_now,
    with_child_execution,
)

from .errors import (
    AttemptActive,
    AttemptNotFound,
    EffectUncertain,
    GrantDenied,
    GrantExpired,
    GrantRevoked,
    InvalidTransition,
    LeaseLost,
    PlanInvalid,
    ProofInvalid,
    ReconcileFailed,
    WorkError,
)
from .lease import Lease, LeaseStore
from .recovery import Recovered, replay, restore_plan
from .state import Attempt, Operation

log = structlog.get_logger("openfunctions.work.controller")

MAX_PLAN_STEPS = 200
SEGMENT_DIR = "attempts"


class WorkController:
    """One controller per work data directory (``<data-dir>/work``), held under a lease.

    Build with :meth:`open` (acquires the lease, recovers, starts renewal);
    always :meth:`close`. ``registry`` must hold the catalog's step tools
    (``of_step.<name>``) and oracles (``of_oracle.<name>``); every step and
    oracle call goes through it.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        catalog: Any,
        registry: ToolRegistry,
        authority: Any = None,
        artifacts: Any = None,
        catalog_loader: Callable[[], Any] | None = None,
        lease_ttl: float = 30.0,
        renew_every: float | None = None,
        owner: str | None = None,
    ) -> None:
        self.root = Path(root)
        self.catalog = catalog
        self.registry = registry
        self.authority = authority
        self.artifacts = artifacts
        self.catalog_loader = catalog_loader
        self.leases = LeaseStore(self.root, ttl=lease_ttl, owner=owner)
        self.renew_every = renew_every if renew_every is not None else lease_ttl / 3.0
        self.lease: Lease | None = None
        self.lease_lost: LeaseLost | None = None
        self.state = Recovered()
        self._journal: Any = None
        self._admission = anyio.Lock()
        self._lifecycle = anyio.Lock()
        self._renewer: asyncio.Task[None] | None = None
        self._renewals = 0
        self._uncertain: Receipt | None = None
        # the step being dispatched (attempt, operation, tool name) and its settled receipt
        self._dispatch: tuple[Attempt, Operation, str] | None = None
        self._dispatch_receipt: Receipt | None = None
        self._observer: _SettledObserver | None = None
        self._closed = False
        self._open_lock = anyio.Lock()

    # == opening and closing ===================================================

    @classmethod
    async def open(cls, root: str | os.PathLike[str], **kwargs: Any) -> "WorkController":
        self = cls(root, **kwargs)
        await self.ensure_open()
        return self

    @property
    def opened(self) -> bool:
        return self._journal is not None

    async def ensure_open(self) -> None:
        """Acquire the lease, recover and start renewal, once (a failed open may be retried)."""
        if self._journal is not None:
            return
        async with self._open_lock:
            if self._journal is not None:
                return
            if self._closed:
                raise WorkError("the work controller is closed")
            await self._open()

    async def _open(self) -> None:
        from openfunctions.core.journal import WorkAttemptJournal

        self.lease = await self.leases.acquire()  # LeaseHeld while another owner is live
        try:
            self.state = await anyio.to_thread.run_sync(self._read_all)
            seg = self.root / SEGMENT_DIR / f"g{self.lease.generation:010d}.jsonl"
            if seg.exists():
                raise WorkError(f"attempt journal segment {seg} already exists for a new lease generation; refusing to reuse it")
            self._journal = await WorkAttemptJournal.open(seg)
            await self._record(
                "lease_acquired",
                {"owner": self.lease.owner, "generation": self.lease.generation, "pid": os.getpid(), "catalog_digest": self.catalog.digest},
            )
            await self._restore_lifecycle()
        except BaseException:
            await self._close_journal()
            await self.leases.release(self.lease)
            self.lease = None
            raise
        self._install_observer()
        self._renewer = asyncio.get_running_loop().create_task(self._renew_loop(), name="work-lease-renewal")
        log.info("work_controller_opened", generation=self.lease.generation, attempts=len(self.state.attempts), records=self.state.records)

    def _segments(self) -> list[Path]:
        d = self.root / SEGMENT_DIR
        if not d.exists():
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            return []
        return sorted(p for p in d.iterdir() if p.name.startswith("g") and p.name.endswith(".jsonl"))

    def _read_all(self) -> Recovered:
        from openfunctions.core.journal import read_records

        def records():
            for seg in self._segments():
                yield from read_records(seg)

        return replay(records())

    async def _restore_lifecycle(self) -> None:
        """Recovery step 5, under the controller's locks: apply and journal the restore transitions."""
        plan = restore_plan(self.state)
        async with self._lifecycle:
            for attempt_id, target, reason in plan:
                await self._transition(self.state.attempts[attempt_id], target, reason)
            if plan or self.state.unknown:
                await self._record(
                    "recovered",
                    {"restored": [{"attempt_id": a, "to": t} for a, t, _ in plan], "unknown_operations": [o for _, o in self.state.unknown]},
                )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._renewer
        self._uninstall_observer()
        await self._close_journal()
        if self.lease is not None and self.lease_lost is None:
            with contextlib.suppress(Exception):
                await self.leases.release(self.lease)
        self.leases.abandon()  # our live flock, if a lost lease left it held

    async def _close_journal(self) -> None:
        if self._journal is not None:
            j, self._journal = self._journal, None
            with contextlib.suppress(Exception):
                await j.close()

    async def __aenter__(self) -> "WorkController":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # == the lease lane ========================================================

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.renew_every)
            try:
                async with self._lifecycle:
                    assert self.lease is not None
                    self.lease = await self.leases.renew(self.lease)
                    self._renewals += 1
            except LeaseLost as exc:
                self._lose_lease(exc)
                return
            except Exception as exc:  # a disk error: keep trying until expiry says otherwise
                log.warning("lease_renewal_failed", error=str(exc))

    def _lose_lease(self, exc: LeaseLost) -> None:
        """Stop all new effects; the attempt is blocked (in memory: the journal is fenced now)."""
        if self.lease_lost is None:
            self.lease_lost = exc
            log.error("lease_lost", error=exc.message)
        att = self._active()
        if att is not None:
            self._block_in_memory(att, {"code": "lease_lost", "message": exc.message})

    def _block_in_memory(self, att: Attempt, reason: dict[str, Any]) -> None:
        """Block without a journal record (the journal refused it); a new holder's recovery decides durably."""
        if not att.terminal and att.state != "blocked":
            att.transition("blocked", at=utc_now(), reason=reason)

    # == journal writes (always fenced) ========================================

    async def _record(self, type_: str, data: dict[str, Any]) -> Any:
        if self.lease_lost is not None:
            raise self.lease_lost
        if self._journal is None:
            raise WorkError("the work controller is closed")
        assert self.lease is not None
        try:
            async with self.leases.fenced(self.lease):
                return await self._journal.append(type_, {**data, "lease_generation": self.lease.generation})
        except LeaseLost as exc:
            self._lose_lease(exc)
            raise

    async def _transition(self, att: Attempt, target: str, reason: dict[str, Any] | None = None, **extra: Any) -> None:
        """Check, journal, then apply one transition. Callers hold ``_lifecycle``."""
        from .state import check_transition

        check_transition(att.attempt_id, att.state, target)
        data = {"attempt_id": att.attempt_id, "from": att.state, "to": target, **extra}
        if reason:
            data["reason"] = reason
        rec = await self._record("transition", data)
        att.transition(target, at=getattr(rec, "time", utc_now()), reason=reason)

    # == the executor observer =================================================

    def _install_observer(self) -> None:
        self._observer = _SettledObserver(self)
        self.registry.executor.add_sink(self._observer)

    def _uninstall_observer(self) -> None:
        observer, self._observer = self._observer, None
        if observer is not None:
            self.registry.executor.remove_sink(observer)

    async def _observe_start(self, record: Any) -> None:
        # The executor persisted the start and is about to enter the step's
        # handler: bind the operation to its receipt id durably, so a later
        # reconciliation can link to the original (never rewritten) receipt
        # even if this process dies before the step settles. If this record
        # cannot be written the executor refuses the call: nothing runs.
        d = self._dispatch
        if d is None or record.tool != d[2] or d[1].dispatch_receipt_id is not None:
            return
        att, op, _ = d
        op.dispatch_receipt_id = record.receipt_id
        if op.effect != "read":
            await self._record("dispatched", {"attempt_id": att.attempt_id, "operation_id": op.operation_id, "receipt_id": record.receipt_id})

    def _observe(self, receipt: Receipt) -> None:
        # Runs inside the executor before the reservation is released: an
        # uncertain step blocks any effect queued behind it right now, not
        # after the outcome is journaled.
        d = self._dispatch
        if d is not None and receipt.receipt_id == d[1].dispatch_receipt_id:
            self._dispatch_receipt = receipt
        if receipt.tool.startswith("of_step.") and receipt.certainty == "unknown":
            self._uncertain = receipt

    # == queries ===============================================================

    def _active(self) -> Attempt | None:
        a = self.state.active
        return self.state.attempts.get(a) if a else None

    def attempt(self, attempt_id: str) -> Attempt:
        att = self.state.attempts.get(attempt_id) if isinstance(attempt_id, str) else None
        if att is None:
            raise AttemptNotFound(f"no attempt {str(attempt_id)[:80]!r} in this data directory", details={"attempt_id": str(attempt_id)[:80]})
        return att

    def status(self, *, principal: str | None, attempt_id: str | None = None) -> dict[str, Any]:
        att = self.attempt(attempt_id) if attempt_id else self._active()
        out: dict[str, Any] = {
            # nothing volatile here (no lease generation, no clock): an unchanged
            # status is byte-identical, so its reply artifact is reused, also after a restart
            "controller": {
                "leaseLost": self.lease_lost is not None,
                "attemptCount": self.state.attempt_count,
                "catalogDigest": self.catalog.digest,
            },
            "attempt": None,
        }
        if att is not None:
            self._require_principal(att, principal)
            out["attempt"] = att.summary()
        return out

    def may_read_artifact(self, artifact_id: str, scope: str | None, *, principal: str | None) -> bool:
        """Whether ``principal`` may read an artifact: one of its saved previews', or its selected attempt's.

        An artifact belongs to an attempt or preview by its recorded store
        scope (command output, reply projections, preview payloads) or by
        being named in that attempt's journaled evidence. Any other
        attempt's artifacts are refused, also after that attempt ended.
        """
        if isinstance(scope, str) and scope.startswith("preview:"):
            prv = self.state.previews.get(scope.split(":", 1)[1])
            if prv is not None and prv.get("principal") == principal:
                return True
        if any(p.get("artifact_id") == artifact_id and p.get("principal") == principal for p in self.state.previews.values()):
            return True
        att = self._active() or self._last_attempt()
        if att is None or att.principal != principal:
            return False
        return scope == att.attempt_id or artifact_id in att.artifacts

    def _last_attempt(self) -> Attempt | None:
        return next(reversed(self.state.attempts.values()), None) if self.state.attempts else None

    # == preview and start =====================================================

    def _check_plan(self, plan: Any) -> list[dict[str, Any]]:
        if not isinstance(plan, list) or not plan:
            raise PlanInvalid("a plan is a non-empty list of {step, params} objects")
        if len(plan) > MAX_PLAN_STEPS:
            raise PlanInvalid(f"a plan has at most {MAX_PLAN_STEPS} steps, got {len(plan)}")
        out = []
        for i, entry in enumerate(plan):
            if not isinstance(entry, Mapping) or not isinstance(entry.get("step"), str):
                raise PlanInvalid(f"plan[{i}] must be an object with a string 'step'", details={"index": i})
            extra = set(entry) - {"step", "params"}
            if extra:
                raise PlanInvalid(f"plan[{i}] has unknown field(s) {sorted(extra)}; only 'step' and 'params'", details={"index": i})
            spec = self.catalog.step(entry["step"])  # UnknownStep names candidates
            try:
                params = spec.validate_params(entry.get("params") or {})
            except PlanInvalid as exc:
                raise PlanInvalid(f"plan[{i}]: {exc.message}", details={"index": i, **exc.details}) from None
            out.append({"step": spec.name, "params": params})
        return out

    def _would_run(self, index: int, entry: dict[str, Any]) -> dict[str, Any]:
        spec = self.catalog.step(entry["step"])
        d: dict[str, Any] = {
            "index": index,
            "step": spec.name,
            "kind": spec.kind,
            "effect": spec.effect,
            "idempotent": spec.idempotent,
            "reconcilable": spec.reconcilable,
            "params": entry["params"],
        }
        if spec.kind == "command":
            d["argv"] = spec.expand_argv(entry["params"])
            d["cwd"] = spec.cwd
        else:
            d["paths"] = list(spec.paths)
        return d

    async def preview(self, plan: Any, *, principal: str | None) -> dict[str, Any]:
        """Check a plan and describe what it would run. No effects; the preview is saved."""
        entries = self._check_plan(plan)
        async with self._admission:
            self._require_custody()
            plan_digest = digest({"catalog": self.catalog.digest, "plan": entries})
            coverage = []
            for i, e in enumerate(entries):
                try:
                    await self._authorize(principal, e["step"], e["params"], effect=False)
                    coverage.append({"index": i, "step": e["step"], "granted": True})
                except GrantDenied as exc:
                    coverage.append({"index": i, "step": e["step"], "granted": False, "reason": exc.message, "code": exc.code})
            fingerprints = await self._fingerprints()
            preview_id = new_id("prv")
            payload = {
                "previewId": preview_id,
                "planDigest": plan_digest,
                "catalogDigest": self.catalog.digest,
                "principal": principal,
                "steps": [self._would_run(i, e) for i, e in enumerate(entries)],
                "grants": coverage,
                "allGranted": all(c["granted"] for c in coverage),
                "fingerprints": fingerprints,
            }
            artifact_id = await self._save_artifact(payload, scope=f"preview:{preview_id}")
            payload["artifactId"] = artifact_id
            rec = {
                "preview_id": preview_id,
                "principal": principal,
                "plan": entries,
                "plan_digest": plan_digest,
                "catalog_digest": self.catalog.digest,
                "artifact_id": artifact_id,
                "created_at": utc_now(),
            }
            await self._record("preview_saved", rec)
            self.state.previews[preview_id] = rec
            return payload

    async def start(self, preview_id: str, *, principal: str | None) -> dict[str, Any]:
        async with self._admission:
            self._require_custody()
            active = self._active()
            if active is not None and not active.terminal:
                raise AttemptActive(
                    f"attempt {active.attempt_id} is active (state {active.state}); complete or cancel it before starting another",
                    details={"attempt_id": active.attempt_id, "state": active.state},
                )
            prv = self.state.previews.get(preview_id) if isinstance(preview_id, str) else None
            if prv is None:
                raise PlanInvalid(f"no saved preview {str(preview_id)[:80]!r}; call of_work_preview first", details={"preview_id": str(preview_id)[:80]})
            if prv.get("principal") != principal:
                raise GrantDenied("this preview was made for another principal", details={"preview_id": preview_id})
            if prv["catalog_digest"] != self.catalog.digest:
                raise PlanInvalid(
                    f"preview {preview_id} was made under catalog {prv['catalog_digest']}, the catalog is now {self.catalog.digest}; preview again",
                    details={"preview_id": preview_id},
                )
            for e in prv["plan"]:
                await self._authorize(principal, e["step"], e["params"], effect=False)
            number = self.state.attempt_count + 1
            attempt_id = new_id("att")
            data = {
                "attempt_id": attempt_id,
                "number": number,
                "preview_id": preview_id,
                "principal": principal,
                "plan": prv["plan"],
                "plan_digest": prv["plan_digest"],
                "catalog_digest": prv["catalog_digest"],
            }
            async with self._lifecycle:
                rec = await self._record("attempt_started", data)
                att = Attempt.started(data, at=rec.time)
                self.state.attempts[attempt_id] = att
                self.state.attempt_count = number
                self.state.active = attempt_id
            return att.summary()

    # == run a step ==============================================================

    def _require_custody(self) -> None:
        if self.lease_lost is not None:
            raise LeaseLost(f"this controller lost its lease: {self.lease_lost.message}", details=self.lease_lost.details)
        if self._closed:
            raise WorkError("the work controller is closed")

    def _require_principal(self, att: Attempt, principal: str | None) -> None:
        if att.principal != principal:
            raise GrantDenied(
                f"attempt {att.attempt_id} belongs to another principal",
                details={"attempt_id": att.attempt_id},
            )

    def _require_selected(self, principal: str | None) -> Attempt:
        att = self._active()
        if att is None:
            raise AttemptNotFound("no attempt is selected: preview a plan and start it first")
        self._require_principal(att, principal)
        return att

    def _select_index(self, att: Attempt, step: str | None, index: int | None) -> int:
        if index is not None:
            if not isinstance(index, int) or not 0 <= index < len(att.plan):
                raise PlanInvalid(f"index {index!r} is outside the plan (0..{len(att.plan) - 1})")
            return index
        if step is not None:
            order = list(range(att.cursor, len(att.plan))) + list(range(0, att.cursor))
            for i in order:
                if att.plan[i]["step"] == step:
                    return i
            raise PlanInvalid(
                f"step {step!r} is not in this attempt's plan (plan steps: {[e['step'] for e in att.plan]})",
                details={"step": str(step)[:80]},
            )
        if att.cursor >= len(att.plan):
            raise PlanInvalid(f"every step of the plan has run ({len(att.plan)}); verify and complete, or name a step to run again")
        return att.cursor

    async def run_step(
        self,
        *,
        principal: str | None,
        step: str | None = None,
        index: int | None = None,
        ctx: ToolExecutionContext | None = None,
    ) -> dict[str, Any]:
        """Run the next plan step (or a named one / an index) through the executor."""
        async with self._admission:
            self._require_custody()
            att = self._require_selected(principal)
            if self._uncertain is not None:
                raise EffectUncertain(f"an earlier step's outcome is uncertain (receipt {self._uncertain.receipt_id}); reconcile first")
            if att.state == "blocked":
                raise EffectUncertain(
                    f"attempt {att.attempt_id} is blocked ({(att.blocked_reason or {}).get('code')}); reconcile or cancel it",
                    details={"attempt_id": att.attempt_id, "reason": att.blocked_reason},
                )
            if att.state not in ("started", "running", "verified"):
                raise InvalidTransition(f"attempt {att.attempt_id} is {att.state}; steps run only when started, running or verified")
            idx = self._select_index(att, step, index)
            entry = att.plan[idx]
            spec = self.catalog.step(entry["step"])
            params = entry["params"]
            self._check_catalog(att)
            grant = await self._authorize(principal, spec.name, params, effect=True, att=att)
            effectful = spec.effect != "read"
            op = Operation(
                operation_id=new_id("op"),
                step=spec.name,
                params=params,
                input_digest=digest({"step": spec.name, "params": params, "catalog": att.catalog_digest}),
                lease_generation=self.lease.generation if self.lease else 0,
                effect=spec.effect,
                plan_index=idx,
            )
            if effectful:
                op.readback = await self._prepare_reconciliation(spec, params)
                async with self._lifecycle:
                    if att.state != "running":
                        await self._transition(att, "running", mutation_epoch=att.mutation_epoch)
                    await self._record(
                        "intent",
                        {
                            "attempt_id": att.attempt_id, "operation_id": op.operation_id, "plan_index": idx,
                            "step": spec.name, "params": params, "effect": spec.effect,
                            "input_digest": op.input_digest, "readback": op.readback,
                        },
                    )
                    att.operations[op.operation_id] = op
            child = self._child_ctx(ctx, principal, att, op, grant)
            dr = None
            self._dispatch, self._dispatch_receipt = (att, op, spec.tool_name), None
            try:
                dr = await self.registry.execute_detailed(spec.tool_name, params, child)
            finally:
                receipt, self._dispatch, self._dispatch_receipt = self._dispatch_receipt, None, None
                if dr is None:
                    # Cancelled (or crashed) while the step ran: the executor
                    # settled a receipt the observer saw; record it, and let
                    # the cancellation go on whatever happens to the record.
                    with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                        await self._settle_op(att, op, None, receipt, cancelled=True)
            return await self._settle_op(att, op, dr, dr.receipt, cancelled=False)

    def _child_ctx(
        self, ctx: ToolExecutionContext | None, principal: str | None, att: Attempt, op: Operation, grant: Any = None
    ) -> ToolExecutionContext:
        # granted_paths: the step tool re-checks its path against the grant
        # right before writing; artifact_scope: its output belongs to the attempt
        meta: dict[str, Any] = {"attempt_id": att.attempt_id, "operation_id": op.operation_id, "artifact_scope": att.attempt_id}
        if grant is not None:
            meta["granted_paths"] = list(grant.paths)
        lease = self.lease.to_dict() if self.lease else None
        if ctx is not None and ctx.receipt_id is not None and ctx.reservation is not None:
            child = with_child_execution(ctx)
            return child.replace(lease=lease, metadata={**dict(child.metadata), **meta})
        return ToolExecutionContext(principal=principal, lease=lease, metadata=meta, progress=ctx.progress if ctx else None)

    async def _settle_op(self, att: Attempt, op: Operation, dr: Any, receipt: Receipt | None, *, cancelled: bool) -> dict[str, Any]:
        if receipt is not None and receipt.certainty == "known":
            status = "done" if receipt.outcome == "succeeded" else ("failed" if receipt.handler_started else "not_done")
        else:
            status = "unknown"
        if op.effect == "read" and status == "unknown":
            status = "failed"  # a read changed nothing, whatever happened to it
        result = None
        artifacts: list[str] = []
        if dr is not None:
            structured = dr.result.structured
            result = structured if structured is not None else {"content": dr.result.content}
            artifacts = sorted(find_artifact_ids(_json_text(result)))
        async with self._lifecycle:
            effect_may_have_happened = op.effect != "read" and status in ("done", "unknown")
            epoch = att.mutation_epoch + 1 if effect_may_have_happened else att.mutation_epoch
            cursor = att.cursor
            if status == "done" and op.plan_index == att.cursor:
                cursor = att.cursor + 1
            try:
                await self._record(
                    "outcome",
                    {
                        "attempt_id": att.attempt_id, "operation_id": op.operation_id, "plan_index": op.plan_index,
                        "step": op.step, "effect": op.effect, "params": op.params, "input_digest": op.input_digest,
                        "status": status, "receipt": receipt.to_dict() if receipt else None,
                        "result_digest": receipt.result_sha256 if receipt else None,
                        "artifacts": artifacts, "mutation_epoch": epoch, "cursor": cursor,
                        "cancelled": cancelled,
                    },
                )
            except BaseException as exc:
                # Fenced (lease lost) or the journal failed: the outcome is not
                # on record. Recovery (here or in the next holder) sees an
                # intent without outcome and treats it as unknown; until then
                # nothing else may run.
                op.status = "unknown"
                att.operations[op.operation_id] = op
                self._block_in_memory(att, {"code": "outcome_unrecorded", "message": f"the outcome of {op.operation_id} could not be recorded: {exc}"[:500]})
                raise
            if receipt is not None and self._uncertain is not None and self._uncertain.receipt_id == receipt.receipt_id:
                self._uncertain = None
            op.status = status
            op.receipt = receipt.to_dict() if receipt else None
            op.result = result
            att.operations[op.operation_id] = op
            att.artifacts.update(artifacts)
            att.cursor = cursor
            if effect_may_have_happened:
                att.mutation_epoch = epoch
                att.proof = None  # a relevant write invalidates the proof
            if status == "unknown":
                await self._transition(
                    att, "blocked",
                    {"code": "effect_uncertain", "message": f"the outcome of step {op.step!r} is unknown; reconcile it", "operations": [op.operation_id]},
                    mutation_epoch=att.mutation_epoch,
                )
            elif att.state in ("started", "verified") and (effect_may_have_happened or att.state == "started"):
                await self._transition(att, "running", mutation_epoch=att.mutation_epoch)
        reply: dict[str, Any] = {
            "attemptId": att.attempt_id,
            "state": att.state,
            "operation": op.summary(),
            "result": result,
            "artifacts": artifacts,
            "cursor": att.cursor,
            "remaining": max(0, len(att.plan) - att.cursor),
        }
        if dr is not None and dr.error is not None:
            reply["error"] = {"code": dr.error.code, "message": dr.error.message}
        return reply

    # == verify and complete =====================================================

    async def verify(self, *, principal: str | None, ctx: ToolExecutionContext | None = None) -> dict[str, Any]:
        async with self._admission:
            self._require_custody()
            att = self._require_selected(principal)
            if att.state == "blocked":
                raise EffectUncertain(f"attempt {att.attempt_id} is blocked; reconcile first", details={"reason": att.blocked_reason})
            self._check_catalog(att)
            async with self._lifecycle:
                await self._transition(att, "verifying")
            try:
                outcome = await self._run_verification(att, principal, ctx)
            except BaseException as exc:
                with anyio.CancelScope(shield=True):
                    if att.state == "verifying" and self.lease_lost is None:
                        async with self._lifecycle:
                            reason = {"code": getattr(exc, "code", "verification_failed"), "message": str(exc)[:500]}
                            if isinstance(exc, (GrantRevoked, GrantExpired)):
                                await self._transition(att, "blocked", reason, mutation_epoch=att.mutation_epoch)
                            else:
                                await self._transition(att, "running", reason, mutation_epoch=att.mutation_epoch)
                raise
            passed = outcome["passed"]
            async with self._lifecycle:
                await self._record("verification", {"attempt_id": att.attempt_id, **outcome})
                att.verifications.append(outcome)
                att.proof = outcome["proof"] if passed else None
                att.artifacts.update(outcome.get("artifacts") or ())
                await self._transition(att, "verified" if passed else "running", mutation_epoch=att.mutation_epoch)
            return {"attemptId": att.attempt_id, "state": att.state, **outcome}

    async def _run_verification(self, att: Attempt, principal: str | None, ctx: ToolExecutionContext | None) -> dict[str, Any]:
        """Run every trusted verifier binding through the executor and build the proof."""
        from .verification import VerifierReceipt, build_proof, environment_digest, input_manifest, subject_patterns

        epoch = att.mutation_epoch
        patterns = subject_patterns(self.catalog)
        before = await self._fingerprints(patterns)
        manifest = input_manifest(self.catalog.workspace, patterns, files=before)
        receipts: list[Any] = []
        checks: list[dict[str, Any]] = []
        artifacts: list[str] = []
        for name in sorted(self.catalog.steps):
            spec = self.catalog.steps[name]
            if not spec.verifier:
                continue
            grant = await self._authorize(principal, spec.name, {}, effect=True, att=att)
            params = spec.validate_params({})
            op = Operation(new_id("op"), spec.name, params, "", self.lease.generation if self.lease else 0, spec.effect)
            dr = await self.registry.execute_detailed(spec.tool_name, params, self._child_ctx(ctx, principal, att, op, grant))
            evidence = dr.result.structured if dr.ok else None
            vr = VerifierReceipt.from_evidence(spec.name, evidence, receipt_id=dr.receipt.receipt_id, accepted=dr.ok)
            receipts.append(vr)
            found = sorted(find_artifact_ids(_json_text(evidence)))
            artifacts.extend(found)
            checks.append(
                {
                    "step": spec.name, "operationId": op.operation_id, "receiptId": dr.receipt.receipt_id,
                    # "tests passed" is the verifier's own fact; "accepted" is the executor's
                    "accepted": vr.accepted, "passed": vr.passed, "exitCode": vr.exit_code, "timedOut": vr.timed_out,
                    "error": dr.error.to_dict() if dr.error else None, "artifacts": found,
                }
            )
        after = await self._fingerprints(patterns)
        proof = build_proof(
            plan_digest=att.plan_digest, catalog_digest=att.catalog_digest,
            environment_digest=await anyio.to_thread.run_sync(environment_digest, self.catalog),
            input_manifest=manifest, fingerprints_before=before, fingerprints_after=after,
            mutation_epoch=epoch, receipts=receipts, attempt_id=att.attempt_id,
        )
        return {
            "verificationId": new_id("ver"),
            "passed": proof.tests_passed,
            "accepted": proof.accepted,
            "checks": checks,
            "fingerprintsStable": before == after,
            "mutation_epoch": epoch,
            "proof": proof.model_dump(mode="json"),
            "proofSummary": proof.summary(),
            "artifacts": artifacts,
        }

    async def complete(self, *, principal: str | None) -> dict[str, Any]:
        from .verification import Proof, check_completion

        async with self._admission:
            self._require_custody()
            att = self._require_selected(principal)
            if att.state != "verified" or att.proof is None:
                raise ProofInvalid(
                    f"attempt {att.attempt_id} is {att.state} without a fresh proof; run of_work_verify first",
                    details={"attempt_id": att.attempt_id, "state": att.state},
                )
            proof_dict = att.proof
            proof = Proof.model_validate(proof_dict)
            # recheck the catalog (from its file), the grant of every plan step, and the subject
            catalog_digest = self._check_catalog(att, reload=True)
            grants = await self._authorize_plan(principal, att)
            grant = min((g for g in grants if g is not None), key=lambda g: g.expires_at, default=None)
            fresh = await self._fingerprints(proof.input_manifest.get("patterns") or ())  # independent re-read
            subject_fence = check_completion(
                proof, catalog_digest=catalog_digest, grant=grant, fingerprints=fresh,
                mutation_epoch=att.mutation_epoch, plan_digest=att.plan_digest,
                current_epoch=lambda: att.mutation_epoch,
            )

            def fence() -> None:
                subject_fence()
                if att.state != "verified" or att.proof is not proof_dict:
                    raise ProofInvalid("the proof changed while completion was being checked; verify again")
                self._require_custody()

            async with self._lifecycle:
                fence()  # synchronous: nothing is awaited between the fence and the terminal record
                await self._transition(att, "completed", {"code": "completed", "proofDigest": proof.proof_digest})
            return {"attemptId": att.attempt_id, "state": att.state, "proofDigest": proof.proof_digest}

    # == reconcile ===============================================================

    async def reconcile(self, *, principal: str | None, operation_id: str | None = None, ctx: ToolExecutionContext | None = None) -> dict[str, Any]:
        async with self._admission:
            self._require_custody()
            att = self._require_selected(principal)
            targets = [op for op in att.operations.values() if op.status == "unknown"]
            if operation_id is not None:
                targets = [op for op in targets if op.operation_id == operation_id]
                if not targets:
                    raise ReconcileFailed(f"operation {str(operation_id)[:80]!r} is not an unknown operation of attempt {att.attempt_id}")
            if not targets:
                return {"attemptId": att.attempt_id, "state": att.state, "reconciled": [], "message": "nothing to reconcile"}
            self._check_catalog(att)
            results = []
            for op in targets:
                results.append(await self._reconcile_one(att, op, principal, ctx))
            async with self._lifecycle:
                still = [op.operation_id for op in att.operations.values() if op.status == "unknown"]
                if not still and att.state == "blocked" and (att.blocked_reason or {}).get("code") == "effect_uncertain":
                    await self._transition(att, "running", {"code": "reconciled"}, mutation_epoch=att.mutation_epoch)
            return {"attemptId": att.attempt_id, "state": att.state, "reconciled": results}

    async def _reconcile_one(self, att: Attempt, op: Operation, principal: str | None, ctx: ToolExecutionContext | None) -> dict[str, Any]:
        spec = self.catalog.step(op.step)
        linked = (op.receipt or {}).get("receipt_id") or op.dispatch_receipt_id
        if not spec.reconcilable or spec.oracle_name is None or not (op.readback or {}).get("reconcilable"):
            verdict, receipt, evidence = "inconclusive", None, {"reason": f"step {op.step!r} has no readback oracle"}
        else:
            grant = await self._authorize(principal, spec.name, op.params, effect=True, att=att)
            dr = await self.registry.execute_detailed(spec.oracle_name, {"readback": op.readback}, self._child_ctx(ctx, principal, att, op, grant))
            receipt = dr.receipt
            evidence = dr.result.structured if dr.ok else {"error": dr.error.to_dict() if dr.error else None}
            verdict = _verdict(evidence) if dr.ok else "inconclusive"
        status = {"applied": "done", "not_applied": "not_done"}.get(verdict, "unknown")
        async with self._lifecycle:
            epoch = att.mutation_epoch + 1 if status == "done" else att.mutation_epoch
            cursor = att.cursor
            if status == "done" and op.plan_index == att.cursor:
                cursor += 1
            await self._record(
                "reconciliation",
                {
                    "attempt_id": att.attempt_id, "operation_id": op.operation_id, "step": op.step,
                    "verdict": verdict, "status": status, "evidence": evidence,
                    "receipt": receipt.to_dict() if receipt else None, "receipt_id": receipt.receipt_id if receipt else None,
                    "linked_receipt_id": linked, "linked_operation_id": op.operation_id,
                    "mutation_epoch": epoch, "cursor": cursor,
                },
            )
            op.reconciliations.append({"receipt_id": receipt.receipt_id if receipt else None, "verdict": verdict, "linked_receipt_id": linked})
            op.status = status
            att.mutation_epoch = epoch
            att.cursor = cursor
            att.proof = None
        return {"operationId": op.operation_id, "step": op.step, "verdict": verdict, "status": status,
                "receiptId": receipt.receipt_id if receipt else None, "linkedReceiptId": linked, "evidence": evidence}

    # == cancel ==================================================================

    async def cancel(self, *, principal: str | None, reason: str | None = None) -> dict[str, Any]:
        async with self._admission:
            self._require_custody()
            att = self._require_selected(principal)
            async with self._lifecycle:
                await self._transition(att, "cancelled", {"code": "cancelled", "message": (reason or "cancelled by the caller")[:500]})
            return {"attemptId": att.attempt_id, "state": att.state}

    # == bindings to the catalog side (authority, readback, fingerprints, artifacts)

    def _check_catalog(self, att: Attempt, *, reload: bool = False) -> str:
        current = self.catalog.digest
        if reload and self.catalog_loader is not None:
            current = self.catalog_loader().digest
        if current != att.catalog_digest:
            raise GrantDenied(
                f"the catalog changed (attempt bound to {att.catalog_digest}, now {current}); cancel and preview again",
                details={"attempt_id": att.attempt_id},
            )
        return current

    async def _authorize_plan(self, principal: str | None, att: Attempt) -> list[Any]:
        """The grant of every distinct (step, paths) of the plan, each checked once.

        A plan repeating a step with the same paths asks the same question
        each time; every distinct one is still asked, so a revoked grant of
        any plan step refuses (and blocks) the completion.
        """
        checked: dict[tuple[str, tuple[str, ...]], Any] = {}
        for e in att.plan:
            key = (e["step"], tuple(_path_params(self.catalog.step(e["step"]), e["params"])))
            if key not in checked:
                checked[key] = await self._authorize(principal, e["step"], e["params"], effect=True, att=att)
        return list(checked.values())

    async def _authorize(self, principal: str | None, step: str, params: dict[str, Any], *, effect: bool, att: Attempt | None = None) -> Any:
        """Grant check for one step (returns the covering grant); a revoked/expired grant during an attempt blocks it."""
        if self.authority is None:
            return None
        spec = self.catalog.step(step)
        paths = _path_params(spec, params)
        try:
            return await self.authority.check(principal=principal, step=spec, paths=paths, lease=self._lease_hook if effect else None)
        except (GrantRevoked, GrantExpired) as exc:
            if att is not None and effect and not att.terminal and att.state != "blocked" and self.lease_lost is None:
                async with self._lifecycle:
                    await self._transition(att, "blocked", {"code": exc.code, "message": exc.message}, mutation_epoch=att.mutation_epoch)
            raise

    async def _lease_hook(self) -> None:
        """Authority's lease check: custody is re-read from the lease file (raises LeaseLost)."""
        self._require_custody()
        assert self.lease is not None
        try:
            await self.leases.check(self.lease)
        except LeaseLost as exc:
            self._lose_lease(exc)
            raise

    async def _prepare_reconciliation(self, spec: Any, params: dict[str, Any]) -> dict[str, Any]:
        """Readback metadata saved with the intent (file IO: in a worker thread)."""
        from .steps import prepare_reconciliation

        return await anyio.to_thread.run_sync(prepare_reconciliation, self.catalog, spec, params)

    async def _fingerprints(self, patterns: Any = None) -> dict[str, str]:
        from .verification import fingerprint, subject_patterns

        pats = tuple(patterns) if patterns else subject_patterns(self.catalog)
        return await anyio.to_thread.run_sync(fingerprint, self.catalog.workspace, pats)

    async def _save_artifact(self, payload: Any, *, scope: str) -> str | None:
        if self.artifacts is None:
            return None
        from openfunctions.core import canonical_bytes

        try:
            ref = await self.artifacts.put(canonical_bytes(payload), media_type="application/json", scope=scope)
        except OpenFunctionsError as exc:
            log.warning("artifact_save_failed", scope=scope, error=exc.message)
            return None
        return ref.id


class _SettledObserver:
    """The executor's ``on_settled`` hook for the controller (see ``_observe``)."""

    def __init__(self, controller: WorkController) -> None:
        self.controller = controller

    async def on_start(self, record: Any) -> None:
        await self.controller._observe_start(record)

    async def on_settled(self, receipt: Receipt) -> None:
        self.controller._observe(receipt)


def _path_params(spec: Any, params: dict[str, Any]) -> list[str]:
    """The values of a step's path parameters: what a grant's path patterns constrain."""
    return [params[p] for p in spec.path_params if isinstance(params.get(p), str)]


def _verdict(evidence: Any) -> str:
    if isinstance(evidence, dict):
        v = evidence.get("status")
        if v in ("applied", "not_applied", "mismatch", "inconclusive"):
            return v
    return "inconclusive"


def _json_text(value: Any) -> str:
    # Executor-checked results and evidence: always JSON.
    return canonical_json(value)


__all__ = ["WorkController", "SEGMENT_DIR", "MAX_PLAN_STEPS"]
