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
2. the executor persists the call's start and the controller journals
   ``dispatched`` (so "no dispatched" proves the handler never ran); a
   command journals its process group (``spawned``) as soon as it exists;
3. the step's registry tool runs through ``registry.execute_detailed``;
4. the outcome (status + receipt) is durable, again under the fence.

A crash between 2 and 4 leaves an operation whose outcome is unknown; it is
never re-run blindly: only a readback (reconciliation, refused while the
command is still running) or an operator's resolution settles it, and it
stays open across attempts (a new plan running the same non-idempotent step
is refused until then).

State: every record is built by :mod:`openfunctions.work._records` (the
format table) and applied to :class:`~openfunctions.work._state.WorkState`
by its ``apply``, right after it is durable; recovery folds the journal with
the same ``apply``. Nothing else changes attempt state (the two in-memory
exceptions, a lost lease and an unrecordable outcome, apply a record that
the fenced journal refused, and stop this controller from writing again).

Locks: ``_admission`` admits one lifecycle call at a time (the selected
attempt has one writer). ``_lifecycle`` serializes state transitions with
lease renewal, so a renewal can never interleave with a terminal
transition. The renewal lane is its own asyncio task and keeps running
while a long step awaits its subprocess.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import structlog

from openfunctions.artifacts import find_artifact_ids
from openfunctions.core import (
    OpenFunctionsError,
    Receipt,
    ToolExecutionContext,
    ToolRegistry,
    WorkGrant,
    canonical_json,
    digest,
    new_id,
    utc_timestamp,
    with_child_execution,
)

from . import _records as R
from ._backend import SEGMENT_DIR, WorkBackend
from ._catalog import Catalog
from ._clock import SYSTEM_CLOCK, Clock, iso
from ._custody import Custody
from ._errors import (
    AttemptActive,
    AttemptNotFound,
    EffectUncertain,
    GrantDenied,
    GrantExpired,
    GrantRevoked,
    InvalidTransition,
    LeaseHeld,
    LeaseLost,
    OperationUncertain,
    PlanInvalid,
    ProofInvalid,
    ReconcileFailed,
    WorkError,
)
from ._lease import Lease
from ._observer import DispatchObserver
from ._procs import boot_id, kill_and_wait, live_processes, start_ticks
from ._protocols import ArtifactSink, AuthorityProtocol
from ._recovery import interrupted, restore_plan, settled_receipts, settled_status
from ._resolutions import ResolutionInbox
from ._state import Attempt, Operation, WorkState, check_transition, fold

log = structlog.get_logger("openfunctions.work._controller")

MAX_PLAN_STEPS = 200
#: attribute set on an error raised after a step or verifier was dispatched
#: (its effect may have happened): the tool layer reports it as uncertain
DISPATCHED_ATTR = "work_dispatched"


def _mark_dispatched(exc: BaseException) -> BaseException:
    with contextlib.suppress(Exception):
        setattr(exc, DISPATCHED_ATTR, True)
    return exc


class _Volatile:
    """A record applied in memory only (the fenced journal refused it)."""

    def __init__(self, rec: R.Rec) -> None:
        self.type, self.data = rec
        self.time = utc_timestamp()


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
        catalog: Catalog,
        registry: ToolRegistry,
        authority: Any = None,
        artifacts: Any = None,
        catalog_loader: Callable[[], Catalog] | None = None,
        lease_ttl: float = 30.0,
        renew_every: float | None = None,
        owner: str | None = None,
        clock: Clock | None = None,
        execution_journals: str | os.PathLike[str] | None = "",
        backend: WorkBackend | None = None,
        lease_wait: float | None = None,
    ) -> None:
        self.root = Path(root)
        # shared: several controllers (server replicas) use one work space in a database (see ._backend)
        self.shared = bool(backend is not None and backend.shared)
        # how long a call of a shared controller waits for another replica's lease (an unresponsive holder: expiry)
        self.lease_wait = float(lease_wait) if lease_wait is not None else 2.0 * (backend.leases.ttl if backend else lease_ttl) + 5.0
        if self.shared:
            execution_journals = None  # the execution journal is in the database, not in <data-dir>/journal
        # a backend's own reader of the execution journal's receipts (the database's), instead of the files
        self._settled_receipts = backend.settled_receipts if backend is not None else None
        # the server's execution journals (<data-dir>/journal), read at recovery for settled receipts;
        # "" = that default, None = do not look
        self.execution_journals: Path | None = (
            None if execution_journals is None else Path(execution_journals) if execution_journals else self.root.parent / "journal"
        )
        self.catalog = catalog
        self.registry = registry
        self.authority: AuthorityProtocol | None = authority
        self.artifacts: ArtifactSink | None = artifacts
        self.catalog_loader = catalog_loader
        self.clock: Clock = clock or SYSTEM_CLOCK
        self.state = WorkState()
        self.inbox: Any = backend.resolutions if backend is not None and backend.resolutions is not None else ResolutionInbox(self.root)
        self._inbox_waiting = False
        self._inbox_read = False  # shared: the inbox was read in this lifecycle call (reset when a call takes the lease)
        self._admission = anyio.Lock()
        self._lifecycle = anyio.Lock()
        if backend is not None:
            lease_ttl = backend.leases.ttl  # the backend's lease decides
        self.custody = Custody(
            self.root, ttl=lease_ttl, renew_every=renew_every if renew_every is not None else lease_ttl / 3.0,
            owner=owner, clock=self.clock, apply=lambda rec: self.state.apply(rec, self.custody.log.where),
            on_lost=self._on_lease_lost, lifecycle=self._lifecycle, backend=backend,
        )
        self._shared_open = False
        self._refold = False
        self.observer = DispatchObserver(self._dispatched)
        self._open_lock = anyio.Lock()

    # custody, as the rest of the controller (and its tests) read it
    @property
    def leases(self) -> Any:
        return self.custody.leases

    @property
    def lease(self) -> Lease | None:
        return self.custody.lease

    @property
    def lease_lost(self) -> LeaseLost | None:
        return self.custody.lost

    @property
    def _renewals(self) -> int:
        return self.custody.renewals

    @property
    def _closed(self) -> bool:
        return self.custody.closed

    # == opening and closing ===================================================

    @classmethod
    async def open(cls, root: str | os.PathLike[str], **kwargs: Any) -> WorkController:
        self = cls(root, **kwargs)
        await self.ensure_open()
        return self

    @property
    def opened(self) -> bool:
        return self._shared_open if self.shared else self.custody.holding

    async def ensure_open(self) -> None:
        """Acquire the lease, recover and start renewal, once (a failed open may be retried)."""
        if self.opened:
            return
        async with self._open_lock:
            if self.opened:
                return
            if self._closed:
                raise WorkError("the work controller is closed")
            await self._open()

    async def _open(self) -> None:
        await self.custody.backend.aopen()
        if self.shared:  # no lease between calls: each lifecycle call takes it (see _admitted)
            self.state = fold(await self.custody.read_all(), self.custody.log.where)
            self.registry.executor.add_sink(self.observer)
            self._shared_open = True
            log.info("work_controller_opened", shared=True, attempts=len(self.state.attempts), records=self.state.records)
            return
        lease = await self.custody.acquire()
        try:
            self.state = fold(await self.custody.read_all(), self.custody.log.where)
            await self._take_custody(lease)
        except BaseException:
            await self.custody.release()
            self.custody.lease = None
            raise
        self.registry.executor.add_sink(self.observer)
        self.custody.start_renewal()
        log.info("work_controller_opened", generation=lease.generation, attempts=len(self.state.attempts), records=self.state.records)

    async def _take_custody(self, lease: Lease) -> None:
        """A new generation's first records: who holds it, then what a restart (or a takeover) concludes."""
        await self._append(R.lease_acquired(owner=lease.owner, generation=lease.generation, pid=os.getpid(), catalog_digest=self.catalog.digest))
        await self._restore_lifecycle()
        async with self._lifecycle:
            await self._sync_resolutions()

    async def refresh(self) -> None:
        """Fold the records other replicas appended (a shared backend; a no-op for the file backend's sole holder)."""
        if self.shared and self._shared_open and not self._refold:
            await self.custody.catch_up()

    @contextlib.asynccontextmanager
    async def _admitted(self) -> AsyncIterator[None]:
        """One lifecycle call at a time; custody checked (held for the process, or taken for this call when shared)."""
        async with self._admission:
            if not self.shared:
                self._require_custody()
                yield
                return
            if self._closed:
                raise WorkError("the work controller is closed")
            lease = await self._acquire_for_call()
            self._inbox_read = False
            try:
                if self._refold:  # the last call lost its lease: its in-memory blocks were never durable
                    self.state = fold(await self.custody.read_all(), self.custody.log.where)
                    self._refold = False
                else:
                    await self.custody.catch_up()
                await self._take_custody(lease)
                self.custody.start_renewal()
                yield
            finally:
                if self.custody.lost is not None:
                    self._refold = True
                await self.custody.release()
                self.custody.lease = None

    async def _acquire_for_call(self) -> Lease:
        """The shared lease, waiting while another replica's call holds it (at most ``lease_wait`` s: its expiry)."""
        deadline = self.clock.time() + self.lease_wait
        delay = 0.02
        while True:
            try:
                return await self.custody.acquire()
            except LeaseHeld:
                if self.clock.time() >= deadline:
                    raise
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.25)

    async def _restore_lifecycle(self) -> None:
        """Journal what a restart concludes (see :mod:`.recovery`), then the lifecycle transitions, under the locks."""
        await self._settle_from_execution_journal()
        unknown, not_started = interrupted(self.state)
        async with self._lifecycle:
            if unknown or not_started:
                await self._append(R.recovered(restored=[], unknown_operations=unknown, not_started_operations=not_started))
            for attempt_id, target, reason in restore_plan(self.state, self.catalog.digest):
                await self._transition(self.state.attempts[attempt_id], target, reason)

    async def _settle_from_execution_journal(self) -> None:
        """Interrupted operations whose call the executor settled: its receipt is the evidence.

        The executor makes a call's receipt durable (the server's execution
        journal) before the controller journals the outcome; a process that
        died in between leaves a settled receipt for an operation the attempt
        journal shows as interrupted. Read-only: the execution journal is read
        with the lock-free reader (files in ``<data-dir>/journal``) or, on a
        shared backend, by the backend's ``settled_receipts`` (the database's
        journals, which every replica appends to); a receipt that is not
        ``known`` proves nothing, and an unreadable journal leaves the
        operations to :func:`.recovery.interrupted`.
        """
        pending = {
            op.dispatch_receipt_id: (att, op)
            for att in self.state.attempts.values() for op in att.operations.values()
            if op.status == "pending" and op.dispatch_receipt_id is not None
        }
        if not pending or (self.execution_journals is None and self._settled_receipts is None):
            return
        try:
            if self._settled_receipts is not None:
                found = await self._settled_receipts(set(pending))
            else:
                assert self.execution_journals is not None
                found = await anyio.to_thread.run_sync(settled_receipts, self.execution_journals, set(pending))
        except (OpenFunctionsError, OSError) as exc:
            where = self.custody.backend.attempts.where if self._settled_receipts is not None else str(self.execution_journals)
            log.warning("execution_journal_unreadable", path=where, error=str(exc)[:300])
            return
        async with self._lifecycle:
            for rid, receipt in found.items():
                att, op = pending[rid]
                if receipt.get("certainty") != "known":
                    continue
                status = settled_status(op, receipt.get("outcome"), "known", bool(receipt.get("handler_started")))
                epoch, cursor = _progress(att, op, status)
                await self._append(R.outcome(
                    attempt_id=att.attempt_id, operation_id=op.operation_id, plan_index=op.plan_index, step=op.step,
                    effect=op.effect, params=op.params, input_digest=op.input_digest, status=status, receipt=receipt,
                    artifacts=[], mutation_epoch=epoch, cursor=cursor, cancelled=False, purpose=op.purpose,
                    source="execution_journal",
                ))

    async def close(self) -> None:
        if self._closed:
            return
        self.custody.closed = True
        self.registry.executor.remove_sink(self.observer)
        await self.custody.release()
        if self.custody.backend.close is not None:
            await self.custody.backend.aclose()

    async def __aenter__(self) -> WorkController:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _on_lease_lost(self, exc: LeaseLost) -> None:
        """Stop all new effects; the attempt is blocked (in memory: the journal is fenced now)."""
        att = self._active()
        if att is not None:
            self._block_in_memory(att, {"code": "lease_lost", "message": exc.message})

    def _lose_lease(self, exc: LeaseLost) -> None:
        self.custody.lose(exc)

    def _block_in_memory(self, att: Attempt, reason: dict[str, Any]) -> None:
        """Block without a journal record (the journal refused it); a new holder's recovery decides durably."""
        if not att.terminal and att.state != "blocked":
            self.state.apply(_Volatile(R.transition(attempt_id=att.attempt_id, from_=att.state, to="blocked", reason=reason)))

    # == journal writes (always fenced), each applied to the state once durable

    async def _append(self, rec: R.Rec) -> Any:
        return await self.custody.append(rec)

    async def _record(self, type_: str, data: dict[str, Any]) -> Any:
        """Append a raw record (tests write interrupted histories with it)."""
        return await self._append((type_, data))

    async def _transition(self, att: Attempt, target: str, reason: dict[str, Any] | None = None, **extra: Any) -> None:
        """Check, journal (and so apply) one transition. Callers hold ``_lifecycle``."""
        check_transition(att.attempt_id, att.state, target)
        await self._append(R.transition(attempt_id=att.attempt_id, from_=att.state, to=target, reason=reason, mutation_epoch=extra.get("mutation_epoch")))

    # == the executor observer =================================================

    async def _dispatched(self, attempt_id: str, operation_id: str, receipt_id: str) -> None:
        # The executor persisted the start and is about to enter the handler:
        # bind the operation to its receipt id durably, so a later
        # reconciliation can link to the original (never rewritten) receipt
        # even if this process dies before the step settles, and so that an
        # intent without this record proves the handler never ran. If this
        # record cannot be written the executor refuses the call: nothing runs.
        await self._append(R.dispatched(attempt_id=attempt_id, operation_id=operation_id, receipt_id=receipt_id))

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
        uncertain = [
            {"operationId": o.operation_id, "attemptId": a.attempt_id, "step": o.step, "at": o.at}
            for a, o in self.state.open_uncertain() if a.principal == principal
        ]
        if uncertain:
            out["controller"]["openUncertain"] = uncertain[:50]
        if att is not None:
            self._require_principal(att, principal)
            out["attempt"] = att.summary()
        return out

    def may_read_artifact(self, artifact_id: str, scope: str | None, *, principal: str | None) -> bool:
        """Whether ``principal`` may read an artifact, by the scope the store recorded when it was minted.

        Readable: artifacts of one of the principal's saved previews (scope
        ``preview:<id>``) and of its selected attempt (scope ``<attempt id>``:
        command output, large reads, reply projections). An artifact id that
        merely appears in an attempt's evidence proves nothing (it can be
        written into a file and read back), so it is never enough.
        """
        if not isinstance(scope, str):
            return False
        if scope.startswith("preview:"):
            prv = self.state.previews.get(scope.split(":", 1)[1])
            return prv is not None and prv.get("principal") == principal
        att = self._active()
        if att is None or att.principal != principal:
            return False
        return scope == att.attempt_id

    def _last_attempt(self) -> Attempt | None:
        return next(reversed(self.state.attempts.values()), None) if self.state.attempts else None

    # == uncertainty that outlives its attempt ===================================

    def _refuse_uncertain(self, plan: list[dict[str, Any]]) -> None:
        """Refuse a plan that would dispatch a step whose earlier effect is still uncertain."""
        steps = {e["step"] for e in plan}
        for att, op in self.state.open_uncertain():
            if op.step not in steps:
                continue
            ways = []
            if (op.readback or {}).get("reconcilable") and att.catalog_digest == self.catalog.digest:
                ways.append(f"of_work_reconcile on attempt {att.attempt_id} (it reads the effect back)")
            ways.append(f"an operator runs: openfunctions-mcp work resolve {op.operation_id} --as applied|not-applied --reason '...'")
            raise OperationUncertain(
                f"step {op.step!r} ran in attempt {att.attempt_id} (operation {op.operation_id}, recorded {op.at or 'earlier'}) "
                f"and its outcome is still unknown; running it again could repeat its effect. Ways out: " + "; or ".join(ways),
                details={"operation_id": op.operation_id, "attempt_id": att.attempt_id, "step": op.step, "at": op.at},
            )

    async def _sync_resolutions(self) -> None:
        """Copy the operator's new resolutions from the inbox into the journal (callers hold ``_lifecycle``).

        A shared backend keeps its own inbox (one seq order for every replica),
        so a seq copied by one replica is skipped by the others.
        """
        if self.inbox.unchanged() and not self._inbox_waiting:
            return
        if self.shared and self._inbox_read:
            return  # read once per lifecycle call, when it took the lease (_take_custody)
        try:
            inbox = await anyio.to_thread.run_sync(self.inbox.read)
        except OpenFunctionsError as exc:
            log.error("resolutions_unreadable", error=exc.message)
            return
        self._inbox_read = True
        self._inbox_waiting = False
        for seq, d in inbox:
            if seq in self.state.resolved_inbox:
                continue
            found = self.state.operation(d["operation_id"])
            if found is None or found[1].status != "unknown":
                continue  # not ours, or settled by evidence meanwhile
            att, op = found
            if await anyio.to_thread.run_sync(live_processes, op.operation_id, op.process):
                self._inbox_waiting = True  # never conclude while its command runs; look again next time
                continue
            applied = d["as"] == "applied"
            cursor = att.cursor + 1 if applied and op.plan_index == att.cursor and op.purpose == "step" else att.cursor
            await self._append(R.resolution(
                attempt_id=att.attempt_id, operation_id=op.operation_id, as_=d["as"], reason=str(d.get("reason", ""))[:2000],
                by=str(d.get("by", "operator"))[:200], at=str(d.get("at", "")), inbox_seq=seq,
                mutation_epoch=att.mutation_epoch + (1 if applied else 0), cursor=cursor,
            ))
            await self._unblock_if_settled(att, "resolved")

    async def _unblock_if_settled(self, att: Attempt, code: str) -> None:
        still = [op.operation_id for op in att.operations.values() if op.status == "unknown"]
        if not still and att.state == "blocked" and (att.blocked_reason or {}).get("code") == "effect_uncertain":
            await self._transition(att, "running", {"code": code}, mutation_epoch=att.mutation_epoch)

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
        elif spec.kind == "tool":
            d["tool"] = spec.tool
        else:
            d["paths"] = list(spec.paths)
        return d

    async def preview(self, plan: Any, *, principal: str | None) -> dict[str, Any]:
        """Check a plan and describe what it would run. No effects; the preview is saved."""
        entries = self._check_plan(plan)
        async with self._admitted():
            async with self._lifecycle:
                await self._sync_resolutions()
            self._refuse_uncertain(entries)
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
            await self._append(R.preview_saved(
                preview_id=preview_id, principal=principal, plan=entries, plan_digest=plan_digest,
                catalog_digest=self.catalog.digest, artifact_id=artifact_id, created_at=iso(self.clock.now()),
            ))
            return payload

    async def start(self, preview_id: str, *, principal: str | None) -> dict[str, Any]:
        async with self._admitted():
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
            async with self._lifecycle:
                await self._sync_resolutions()
            self._refuse_uncertain(prv["plan"])
            for e in prv["plan"]:
                await self._authorize(principal, e["step"], e["params"], effect=False)
            attempt_id = new_id("att")
            async with self._lifecycle:
                await self._append(R.attempt_started(
                    attempt_id=attempt_id, number=self.state.attempt_count + 1, preview_id=preview_id, principal=principal,
                    plan=prv["plan"], plan_digest=prv["plan_digest"], catalog_digest=prv["catalog_digest"],
                ))
            return self.state.attempts[attempt_id].summary()

    # == run a step ==============================================================

    def _require_custody(self) -> None:
        self.custody.require()

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
            if step is not None and att.plan[index]["step"] != step:
                # strict clients send both fields: a contradiction is refused, never guessed
                raise PlanInvalid(
                    f"plan[{index}] is step {att.plan[index]['step']!r}, not {str(step)[:80]!r}; "
                    "give the index, the step, or both naming the same step",
                    details={"index": index, "step": str(step)[:80], "plan_step": att.plan[index]["step"]},
                )
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
        async with self._admitted():
            att = self._require_selected(principal)
            async with self._lifecycle:
                await self._sync_resolutions()
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
            op = await self._intend(att, spec, params, plan_index=idx, purpose="step")
            dr = await self._run_op(att, op, spec, params, ctx, principal, grant)
            return await self._settle_op(att, op, dr, dr.receipt, cancelled=False)

    async def _intend(self, att: Attempt, spec: Any, params: dict[str, Any], *, plan_index: int | None, purpose: str) -> Operation:
        """The operation about to run; for an effect, its intent is durable first (and the attempt running)."""
        op = Operation(
            operation_id=new_id("op"), step=spec.name, params=params,
            input_digest=digest({"step": spec.name, "params": params, "catalog": att.catalog_digest}),
            lease_generation=self.lease.generation if self.lease else 0, effect=spec.effect,
            plan_index=plan_index, idempotent=spec.idempotent, purpose=purpose,
        )
        if spec.effect == "read":
            return op  # a read changes nothing: its outcome record is enough
        rerunnable = purpose == "step" and self._tool_idempotent(spec)
        rerun_of = _rerun_of(att, plan_index) if rerunnable else None
        readback = await self._prepare_reconciliation(spec, params)
        async with self._lifecycle:
            if purpose == "step" and att.state != "running":
                await self._transition(att, "running", mutation_epoch=att.mutation_epoch)
            await self._append(R.intent(
                attempt_id=att.attempt_id, operation_id=op.operation_id, plan_index=plan_index, step=spec.name,
                params=params, effect=spec.effect, idempotent=spec.idempotent, input_digest=op.input_digest,
                readback=readback, purpose=purpose, rerunnable=rerunnable, rerun_of=rerun_of,
            ))
        return att.operations[op.operation_id]

    def _tool_idempotent(self, spec: Any) -> bool:
        """A ``tool`` step whose registered tool declares ``capability.idempotent`` (running it again is harmless)."""
        if spec.kind != "tool" or spec.tool_name not in self.registry:
            return False
        cap = self.registry.get(spec.tool_name).capability
        return bool(cap is not None and cap.idempotent)

    async def _run_op(self, att: Attempt, op: Operation, spec: Any, params: dict[str, Any], ctx: ToolExecutionContext | None, principal: str | None, grant: Any) -> Any:
        """Dispatch through the executor; a cancelled call's outcome is recorded before the cancellation goes on."""
        child = self._child_ctx(ctx, principal, att, op, grant)
        self.observer.begin(att.attempt_id, op.operation_id, spec.tool_name, effectful=spec.effect != "read")
        dr = None
        try:
            dr = await self.registry.execute_detailed(spec.tool_name, params, child)
        finally:
            receipt = self.observer.end()
            if dr is None and not (op.purpose == "verify" and op.effect == "read"):
                # Cancelled (or crashed) while the call ran: the executor
                # settled a receipt the observer saw; record it, and let the
                # cancellation go on whatever happens to the record.
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await self._settle_op(att, op, None, receipt, cancelled=True)
        return dr

    def _child_ctx(
        self, ctx: ToolExecutionContext | None, principal: str | None, att: Attempt, op: Operation, grant: Any = None
    ) -> ToolExecutionContext:
        # granted_paths: the step tool re-checks its path against the grant
        # right before writing; artifact_scope: its output belongs to the attempt;
        # on_spawn: a command's process group is journaled as soon as it exists
        async def on_spawn(pid: int) -> None:
            await self._append(R.spawned(
                attempt_id=att.attempt_id, operation_id=op.operation_id, pid=pid, pgid=pid,
                start_ticks=start_ticks(pid), boot_id=boot_id(),
            ))

        work = WorkGrant(attempt_id=att.attempt_id, operation_id=op.operation_id, artifact_scope=att.attempt_id,
                         granted_paths=None if grant is None else tuple(grant.paths),
                         on_spawn=None if op.effect == "read" else on_spawn)
        lease = self.lease.to_dict() if self.lease else None
        if ctx is not None and ctx.receipt_id is not None and ctx.reservation is not None:
            return with_child_execution(ctx).replace(lease=lease, work=work)
        return ToolExecutionContext(principal=principal, lease=lease, work=work, progress=ctx.progress if ctx else None)

    async def _settle_op(self, att: Attempt, op: Operation, dr: Any, receipt: Receipt | None, *, cancelled: bool) -> dict[str, Any]:
        status = settled_status(op, receipt.outcome if receipt else None, receipt.certainty if receipt else None,
                                bool(receipt and receipt.handler_started))
        result = None
        artifacts: list[str] = []
        if dr is not None:
            structured = dr.result.structured
            result = structured if structured is not None else {"content": dr.result.content}
            artifacts = sorted(find_artifact_ids(_canonical_text(result)))
        step_op = op.purpose == "step"
        async with self._lifecycle:
            effect_may_have_happened = op.effect != "read" and (status in ("done", "unknown") or (status == "failed" and op.rerunnable))
            epoch, cursor = _progress(att, op, status)
            rec = R.outcome(
                attempt_id=att.attempt_id, operation_id=op.operation_id, plan_index=op.plan_index, step=op.step,
                effect=op.effect, params=op.params, input_digest=op.input_digest, status=status,
                receipt=receipt.to_dict() if receipt else None, artifacts=artifacts, mutation_epoch=epoch,
                cursor=cursor, cancelled=cancelled, purpose=op.purpose,
            )
            try:
                await self._append(rec)
            except BaseException as exc:
                # Fenced (lease lost) or the journal failed: the outcome is not
                # on record. Recovery (here or in the next holder) sees an
                # intent without outcome and treats it as unknown; until then
                # nothing else may run.
                self.state.apply(_Volatile(R.outcome(**{**_outcome_kwargs(rec), "status": "unknown"})))
                self._block_in_memory(att, {"code": "outcome_unrecorded", "message": f"the outcome of {op.operation_id} could not be recorded: {exc}"[:500]})
                _mark_dispatched(exc)
                raise
            if step_op:
                if status == "unknown":
                    await self._transition(
                        att, "blocked",
                        {"code": "effect_uncertain", "message": f"the outcome of step {op.step!r} is unknown; reconcile it", "operations": [op.operation_id]},
                        mutation_epoch=att.mutation_epoch,
                    )
                elif att.state in ("started", "verified") and (effect_may_have_happened or att.state == "started"):
                    await self._transition(att, "running", mutation_epoch=att.mutation_epoch)
        settled = att.operations.get(op.operation_id, op)
        reply: dict[str, Any] = {
            "attemptId": att.attempt_id,
            "state": att.state,
            "operation": settled.summary(),
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
        async with self._admitted():
            att = self._require_selected(principal)
            if att.state == "blocked":
                raise EffectUncertain(f"attempt {att.attempt_id} is blocked; reconcile first", details={"reason": att.blocked_reason})
            self._check_catalog(att)
            async with self._lifecycle:
                await self._transition(att, "verifying")
            dispatched: list[str] = []
            try:
                outcome = await self._run_verification(att, principal, ctx, dispatched)
            except BaseException as exc:
                with anyio.CancelScope(shield=True):
                    if att.state == "verifying" and self.lease_lost is None:
                        async with self._lifecycle:
                            unknown = [o.operation_id for o in att.operations.values() if o.purpose == "verify" and o.status == "unknown"]
                            reason = {"code": getattr(exc, "code", "verification_failed"), "message": str(exc)[:500]}
                            if unknown:
                                reason = {"code": "effect_uncertain", "message": "a verifier's outcome is unknown; reconcile it", "operations": unknown}
                            if unknown or isinstance(exc, (GrantRevoked, GrantExpired)):
                                await self._transition(att, "blocked", reason, mutation_epoch=att.mutation_epoch)
                            else:
                                await self._transition(att, "running", reason, mutation_epoch=att.mutation_epoch)
                if dispatched:
                    _mark_dispatched(exc)
                raise
            passed = outcome["passed"]
            async with self._lifecycle:
                await self._append(R.verification(attempt_id=att.attempt_id, outcome=outcome))
                await self._transition(att, "verified" if passed else "running", mutation_epoch=att.mutation_epoch)
            return {"attemptId": att.attempt_id, "state": att.state, **outcome}

    def _verifiers(self) -> list[Any]:
        return [self.catalog.steps[n] for n in sorted(self.catalog.steps) if self.catalog.steps[n].verifier]

    async def _run_verification(
        self, att: Attempt, principal: str | None, ctx: ToolExecutionContext | None, dispatched: list[str]
    ) -> dict[str, Any]:
        """Run every trusted verifier binding through the executor and build the proof.

        A verifier with an effect is an operation like a step: intent first,
        then its outcome (never moving the mutation epoch); a read-only one
        needs no intent.
        """
        from ._verification import VerifierReceipt, create_proof, environment_digest, input_manifest, subject_patterns

        epoch = att.mutation_epoch
        patterns = subject_patterns(self.catalog)
        before = await self._fingerprints(patterns)
        manifest = input_manifest(self.catalog.workspace, patterns, files=before)
        receipts: list[Any] = []
        checks: list[dict[str, Any]] = []
        artifacts: list[str] = []
        for spec in self._verifiers():
            grant = await self._authorize(principal, spec.name, {}, effect=True, att=att)
            params = spec.validate_params({})
            op = await self._intend(att, spec, params, plan_index=None, purpose="verify")
            dispatched.append(op.operation_id)
            dr = await self._run_op(att, op, spec, params, ctx, principal, grant)
            if spec.effect != "read":
                await self._settle_op(att, op, dr, dr.receipt, cancelled=False)
            evidence = dr.result.structured if dr.ok else None
            vr = VerifierReceipt.from_evidence(spec.name, evidence, receipt_id=dr.receipt.receipt_id, accepted=dr.ok)
            receipts.append(vr)
            found = sorted(find_artifact_ids(_canonical_text(evidence)))
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
        proof = create_proof(
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
        from ._verification import Proof, check_completion, environment_digest

        async with self._admitted():
            att = self._require_selected(principal)
            if att.state != "verified" or att.proof is None:
                raise ProofInvalid(
                    f"attempt {att.attempt_id} is {att.state} without a fresh proof; run of_work_verify first",
                    details={"attempt_id": att.attempt_id, "state": att.state},
                )
            proof_dict = att.proof
            proof = Proof.model_validate(proof_dict)
            if proof.fingerprints_before != proof.fingerprints_after:
                raise ProofInvalid(
                    "the verifier changed the files it verified (fingerprints before != after): the proof is not about "
                    "the subject as it is now; fix the verifier or verify again",
                    details={"attempt_id": att.attempt_id},
                )
            # every awaited readback first (catalog file, subject, environment) ...
            catalog_digest = self._check_catalog(att, reload=True)
            fresh = await self._fingerprints(proof.input_manifest.get("patterns") or ())  # independent re-read
            env = await anyio.to_thread.run_sync(environment_digest, self.catalog)
            if env != proof.environment_digest:
                raise ProofInvalid(
                    "the environment the verifiers ran in changed since verification (a program or variable); verify again",
                    details={"attempt_id": att.attempt_id},
                )
            # ... then the grants, so a revocation during those reads is seen
            grants = await self._authorize_plan(principal, att)
            grant = min((g for g in grants if g is not None), key=lambda g: g.expires_at, default=None)
            subject_fence = check_completion(
                proof, catalog_digest=catalog_digest, grant=grant, fingerprints=fresh,
                mutation_epoch=att.mutation_epoch, plan_digest=att.plan_digest,
                current_epoch=lambda: att.mutation_epoch,
            )

            def fence() -> None:
                subject_fence()
                self._grants_still_live(grants)
                if att.state != "verified" or att.proof is not proof_dict:
                    raise ProofInvalid("the proof changed while completion was being checked; verify again")
                self._require_custody()

            async with self._lifecycle:
                try:
                    fence()  # synchronous: nothing is awaited between the fence and the terminal record
                except (GrantRevoked, GrantExpired) as exc:
                    await self._transition(att, "blocked", {"code": exc.code, "message": exc.message}, mutation_epoch=att.mutation_epoch)
                    raise
                await self._transition(att, "completed", {"code": "completed", "proofDigest": proof.proof_digest})
            return {"attemptId": att.attempt_id, "state": att.state, "proofDigest": proof.proof_digest}

    def _grants_still_live(self, grants: list[Any]) -> None:
        """The fence's grant check: re-read the grants file synchronously (revocation and expiry)."""
        if self.authority is None:
            return
        now = self.clock.now()
        current = self.authority.grants.load_sync()
        for g in grants:
            if g is None:
                continue
            cur = current.get(g.grant_id, g)
            if cur.revoked():
                raise GrantRevoked(f"grant {g.grant_id} was revoked while completion was being checked", details={"grant_id": g.grant_id})
            if cur.expired(now):
                raise GrantExpired(f"grant {g.grant_id} expired while completion was being checked", details={"grant_id": g.grant_id})

    # == reconcile ===============================================================

    async def reconcile(self, *, principal: str | None, operation_id: str | None = None, ctx: ToolExecutionContext | None = None) -> dict[str, Any]:
        async with self._admitted():
            att = self._require_selected(principal)
            async with self._lifecycle:
                await self._sync_resolutions()
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
                await self._unblock_if_settled(att, "reconciled")
            return {"attemptId": att.attempt_id, "state": att.state, "reconciled": results}

    async def _reconcile_one(self, att: Attempt, op: Operation, principal: str | None, ctx: ToolExecutionContext | None) -> dict[str, Any]:
        spec = self.catalog.step(op.step)
        linked = (op.receipt or {}).get("receipt_id") or op.dispatch_receipt_id
        receipt = None
        evidence: dict[str, Any] | None  # the oracle's structured reply, or why there is none
        alive = await anyio.to_thread.run_sync(live_processes, op.operation_id, op.process)
        if alive:
            # a readback now would read the world before the command finishes changing it
            verdict, evidence = "still_running", {
                "pids": alive[:20],
                "reason": f"the command of operation {op.operation_id} is still running (pids {alive[:20]}); nothing can be "
                "concluded until it stops: wait and reconcile again, or of_work_cancel (kills it and waits)",
            }
        elif not spec.reconcilable or spec.oracle_name is None or not (op.readback or {}).get("reconcilable"):
            verdict, evidence = "inconclusive", {"reason": f"step {op.step!r} has no readback oracle; an operator must resolve it "
                                                 f"(openfunctions-mcp work resolve {op.operation_id} --as applied|not-applied --reason ...)"}
        else:
            grant = await self._authorize(principal, spec.name, op.params, effect=True, att=att)
            dr = await self.registry.execute_detailed(spec.oracle_name, {"readback": op.readback}, self._child_ctx(ctx, principal, att, _as_read(op), grant))
            receipt = dr.receipt
            evidence = dr.result.structured if dr.ok else {"error": dr.error.to_dict() if dr.error else None}
            verdict = _verdict(evidence) if dr.ok else "inconclusive"
        # partial: changed but maybe unfinished; the step is idempotent, so it counts as not done and runs again
        status = {"applied": "done", "not_applied": "not_done", "partial": "not_done"}.get(verdict, "unknown")
        async with self._lifecycle:
            changed = verdict in ("applied", "partial")
            epoch = att.mutation_epoch + 1 if changed else att.mutation_epoch
            cursor = att.cursor + 1 if status == "done" and op.plan_index == att.cursor and op.purpose == "step" else att.cursor
            await self._append(R.reconciliation(
                attempt_id=att.attempt_id, operation_id=op.operation_id, step=op.step, verdict=verdict, status=status,
                evidence=evidence, receipt=receipt.to_dict() if receipt else None, linked_receipt_id=linked,
                mutation_epoch=epoch, cursor=cursor,
            ))
        return {"operationId": op.operation_id, "step": op.step, "verdict": verdict, "status": status,
                "receiptId": receipt.receipt_id if receipt else None, "linkedReceiptId": linked, "evidence": evidence}

    # == cancel ==================================================================

    async def cancel(self, *, principal: str | None, reason: str | None = None) -> dict[str, Any]:
        """Cancel the selected attempt; first kill (and wait for) any command of its uncertain operations still running.

        Its uncertain operations stay uncertain: cancelling an attempt does
        not discharge an effect in the world (see :meth:`_refuse_uncertain`).
        """
        async with self._admitted():
            att = self._require_selected(principal)
            check_transition(att.attempt_id, att.state, "cancelled")
            killed: dict[str, list[int]] = {}
            for op in list(att.operations.values()):
                if op.status != "unknown":
                    continue
                try:
                    pids = await anyio.to_thread.run_sync(kill_and_wait, op.operation_id, op.process)
                except TimeoutError as exc:
                    raise WorkError(f"cannot cancel attempt {att.attempt_id}: {exc}", details={"operation_id": op.operation_id}) from None
                if pids:
                    killed[op.operation_id] = pids
            why: dict[str, Any] = {"code": "cancelled", "message": (reason or "cancelled by the caller")[:500]}
            if killed:
                why["killed"] = killed
            async with self._lifecycle:
                await self._transition(att, "cancelled", why)
            out: dict[str, Any] = {"attemptId": att.attempt_id, "state": att.state}
            still = [o for a, o in self.state.open_uncertain() if a is att]
            if killed:
                out["killed"] = killed
            if still:
                out["uncertainOperations"] = [o.operation_id for o in still]
                out["message"] = (
                    "these operations stay uncertain after the cancel: a new attempt that runs their steps is refused "
                    "until a readback (of_work_reconcile) or an operator (openfunctions-mcp work resolve) settles them"
                )
            return out

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
            return await self.authority.check(principal=principal, step=spec, paths=paths, lease=self._lease_hook if effect else None, now=self.clock.now())
        except (GrantRevoked, GrantExpired) as exc:
            if att is not None and effect and not att.terminal and att.state != "blocked" and self.lease_lost is None:
                async with self._lifecycle:
                    await self._transition(att, "blocked", {"code": exc.code, "message": exc.message}, mutation_epoch=att.mutation_epoch)
            raise

    async def _lease_hook(self) -> None:
        """Authority's lease check: custody is re-read from the lease file (raises LeaseLost)."""
        await self.custody.check()

    async def _prepare_reconciliation(self, spec: Any, params: dict[str, Any]) -> dict[str, Any]:
        """Readback metadata saved with the intent (file IO: in a worker thread; a ``tool`` step: its capability's binding)."""
        from ._steps import prepare_reconciliation, prepare_tool_reconciliation

        if spec.kind == "tool":
            return await prepare_tool_reconciliation(spec, self.registry.get(spec.tool_name), params)
        return await anyio.to_thread.run_sync(prepare_reconciliation, self.catalog, spec, params)

    async def _fingerprints(self, patterns: Any = None) -> dict[str, str]:
        from ._verification import fingerprint, subject_patterns

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


def _rerun_of(att: Attempt, plan_index: int | None) -> str | None:
    """The receipt id of the last call of this plan step that a re-runnable tool left uncertain (settled ``failed``)."""
    for op in reversed(list(att.operations.values())):
        if op.plan_index != plan_index or op.purpose != "step":
            continue
        r = op.receipt or {}
        if op.rerunnable and op.status == "failed" and r.get("certainty", "unknown") == "unknown":
            return r.get("receipt_id") or op.dispatch_receipt_id
        return None  # the step's last call was not left uncertain
    return None


def _progress(att: Attempt, op: Operation, status: str) -> tuple[int, int]:
    """``(mutation_epoch, cursor)`` after ``op`` settles with ``status`` (live and at recovery)."""
    step_op = op.purpose == "step"
    # a re-runnable step that failed may have had its effect (its outcome was unknown): the epoch moves
    effect_may_have_happened = op.effect != "read" and (status in ("done", "unknown") or (status == "failed" and op.rerunnable))
    # a verifier's effects do not move the epoch (the proof it builds is
    # bound to it); the subject fingerprints before/after show what it changed
    epoch = att.mutation_epoch + 1 if effect_may_have_happened and step_op else att.mutation_epoch
    cursor = att.cursor + 1 if step_op and status == "done" and op.plan_index == att.cursor else att.cursor
    return epoch, cursor


def _path_params(spec: Any, params: dict[str, Any]) -> list[str]:
    """The values of a step's path parameters: what a grant's path patterns constrain."""
    return [params[p] for p in spec.path_params if isinstance(params.get(p), str)]


def _verdict(evidence: Any) -> str:
    if isinstance(evidence, dict):
        v = evidence.get("status")
        if isinstance(v, str) and v in ("applied", "not_applied", "partial", "mismatch", "inconclusive"):
            return v
    return "inconclusive"


def _as_read(op: Operation) -> Operation:
    """The oracle's call context: a read (no process to journal)."""
    import dataclasses

    return dataclasses.replace(op, effect="read")


def _outcome_kwargs(rec: R.Rec) -> dict[str, Any]:
    d = dict(rec[1])
    d.pop("result_digest", None)
    return d


def _canonical_text(value: Any) -> str:
    # Executor-checked results and evidence: always JSON.
    return canonical_json(value)


__all__ = ["WorkController", "SEGMENT_DIR", "MAX_PLAN_STEPS"]
