"""The workflow run journal: its records, the one fold over them, the live writer.

Workflow run journal, format version 2 (also in docs/formats/workflow-runs.md)
==============================================================================

One core journal (``openfunctions.core.journal.JournalLog``: the byte format,
checksums, chain, fsync and flock are documented in
``core/journal/_encoder.py``) holds every run of a data directory::

    <data-dir>/workflows/runs.journal              (0600; dirs 0700)
    <data-dir>/workflows/runs.journal.lock         its writer's flock (one writer process)
    <data-dir>/workflows/runs.journal.seg-NNNNNN   only while a compaction is under way

Header: ``kind`` ``"workflow-runs"``, ``meta`` ``{"format":
"openfunctions.workflow-runs", "version": 2}`` (a compacted file's header
also has ``previous``, the core journal's link to the segment it replaced).
Runs share the file, so a new run costs no file creation; their appends
share the log's group commit (one ``write`` + one ``fdatasync`` for every
record queued together, whichever runs they belong to).

Every record's ``data`` carries ``run_id``; a run's records are folded by
:func:`apply` into its :class:`WorkflowRunState` (``fold`` routes a record to its
run), live and at recovery alike. Records (``type``: ``data``), in the
order a run writes them:

- ``run_started``: ``{run_id, workflow, digest, input}`` — the run's first
  record (a run id with no record is a run that never started).
  ``digest`` is ``sha256:<hex>`` of the workflow's canonical step description
  (kinds, names, tool names, nesting); ``input`` the run's JSON input.
- ``step_started``: ``{run_id, step, name, tool, params}`` — written, and
  fsynced, *before* a tool step whose tool's ``capability.effect`` is not
  ``"read"`` runs. ``step`` is the step's path in the workflow (``"2"``,
  ``"3.1.0"``, ``"4.t.0"``: sequence index, parallel branch, branch side
  ``t``/``f``). A ``step_started`` with no later ``step_settled`` is an
  **uncertain** step.
- ``step_settled``: ``{run_id, step, name, status, result?, error?,
  receipt_id?, certainty?, uncertain?, attempt?, rerun?, rerun_of?,
  requires_verification?}`` — ``status``
  ``succeeded`` (``result``: the step's JSON result), ``failed``
  (``error``: ``{code, message}``) or ``cancelled``; tool steps add the
  executor's ``receipt_id`` and ``certainty``; a failed or cancelled non-read
  tool step whose receipt certainty is ``unknown`` has ``uncertain: true``.
  ``attempt`` (from 2): a retried step's failed attempts are not recorded,
  only the attempt that settled it.
- ``run_blocked``: ``{run_id, steps, reason}`` — written when a run is
  opened to resume and has uncertain steps (``steps``: their paths).
- ``step_resolved``: ``{run_id, step, applied, result?, by, rerun?,
  rerun_of?}`` — an operator's answer for an uncertain step: ``applied:
  true`` settles it with ``result``; ``applied: false`` says the effect did
  not happen, so the step runs again. Written by the runner itself, with
  ``applied: false``, ``by: null``, ``rerun: true`` and ``rerun_of`` (the
  uncertain call's receipt id, or null when the process died before the
  call had one), for an uncertain step whose tool declares
  ``capability.idempotent``: running it again is harmless, so it is not
  blocked. The step's next ``step_settled`` then carries the same
  ``rerun: true``, ``rerun_of``.
- ``run_finished``: ``{run_id, status, result?, error?}`` — ``status``
  ``succeeded`` (``result``), ``failed`` (``error``: ``{code, message,
  details?}``) or ``cancelled``. Nothing of that run follows it but
  ``step_verified``.
- ``step_verified``: ``{run_id, step, receipt_id, tool, by}`` — a verifier
  call's succeeded receipt linked to a succeeded step whose ``step_settled``
  has ``requires_verification: true`` (its tool declares
  ``capability.requires_verification``). Written by
  ``WorkflowRuns.verify``, before or after ``run_finished``. A ``succeeded``
  run with such a step not yet verified is not *completed*
  (:attr:`WorkflowRunState.completed`; ``awaiting_verification`` in its summary).
- ``run_snapshot``: ``{run_id, state}`` — written only by a compaction:
  the run's whole folded state (``state``: :meth:`WorkflowRunState.snapshot`); it
  replaces whatever was folded for that run before.
- ``compacted``: ``{segments, kept, pruned}`` — the last record of a
  compaction's batch (no ``run_id``; not folded into any run).

The journal is the core record stream :data:`WORKFLOW_RUNS`
(``openfunctions.core.records``): its file backend opens, folds and compacts
it; in PostgreSQL its table backend does (rows: ``store/_pg_workflows_schema.py``).

Compaction (retention decided in ``_runs.py``, the mechanism the core
stream's, ``core/records/_file.py``): the file is rotated into a segment
(``JournalLog.rotate``), a ``run_snapshot`` for every run that is kept and a
``compacted`` record are appended as one batch (one fsync), then the
segments are deleted (and the directory fsynced). Reading: if the file holds
a ``compacted`` record, the segments it names are obsolete (a crash before
their deletion left them; they are deleted now); otherwise the segments are
folded first, oldest first from the newest one that holds a ``compacted``
record, then the file (a crash in mid-compaction loses nothing: the
snapshots that made it repeat what the segment says).

Durability (when each record is fsynced; records written together share one
fsync): ``step_started`` before its step's tool handler runs (the handler
waits for it; the fsync overlaps the executor's own start record), with
everything buffered before it; ``run_finished`` before the run returns. ``run_started`` and
``step_settled`` are buffered: a non-read tool step's outcome is flushed
before the next tool or LLM step starts (at the latest); an LLM step's
right after it settles; a read step's or a transform's rides along with the
next fsync. So a crash can lose the records of reads, transforms and a
not-yet-flushed ``run_started`` (recomputed, or the run starts afresh), and a
non-read step that settled but was not yet flushed stays uncertain (it
blocks; it is never re-run blindly).

Reading fails closed (the stream's policy for unknown records is
``REFUSE``): an unknown record type, a record missing a field or a header of
another format raise :class:`RunCorrupt` naming the file; nothing is folded
from part of a run's records.

Version 1 (one file per run, ``<data-dir>/workflows/runs/<sha256(run_id)[:32]>.jsonl``,
records without ``run_id``) is migrated on open: each such run becomes a
``run_snapshot`` in the shared journal, then its file is removed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openfunctions.core import canonical_json, to_utf8
from openfunctions.core.errors import NonJsonValue
from openfunctions.core.records import RecordStream, UnknownRecords

from ._errors import RunCorrupt, StepOutputInvalid

KIND = "workflow-runs"
FORMAT = "openfunctions.workflow-runs"
VERSION = 2
#: the per-run files of version 1 (migrated on open)
V1_KIND, V1_FORMAT, V1_VERSION = "workflow-run", "openfunctions.workflow-run", 1
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


@dataclass
class StepRecord:
    """What the journal says about one step."""

    step: str
    name: str
    status: str  # started | succeeded | failed | cancelled
    tool: str | None = None
    params: Any = None
    result: Any = None
    error: dict[str, Any] | None = None
    receipt_id: str | None = None
    certainty: str | None = None
    uncertain: bool = False
    resolved_by: str | None = None
    rerun: bool = False
    rerun_of: str | None = None
    requires_verification: bool = False
    verification: dict[str, Any] | None = None

    @property
    def is_uncertain(self) -> bool:
        """Started and never settled, or settled failed/cancelled with an unknown effect."""
        return self.status == "started" or (self.uncertain and self.status in ("failed", "cancelled"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step, "name": self.name, "status": self.status}
        for k in ("tool", "receipt_id", "certainty", "resolved_by", "rerun_of"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        if self.rerun:
            out["rerun"] = True
        if self.requires_verification:
            out["requires_verification"] = True
            out["verification"] = self.verification
        if self.status == "succeeded":
            out["result"] = self.result
        if self.error is not None:
            out["error"] = self.error
        if self.status == "started":
            out["params"] = self.params
        if self.is_uncertain:
            out["uncertain"] = True
        return out


@dataclass
class WorkflowRunState:
    """One run, as the fold of its journal. Built by :func:`apply` live and at recovery alike."""

    run_id: str
    workflow: str = ""
    digest: str = ""
    input: Any = None
    # new (no record yet: running its first reads, or crashed before its first fsync) | running | blocked
    # | succeeded | failed | cancelled
    status: str = "new"
    result: Any = None
    error: dict[str, Any] | None = None
    steps: dict[str, StepRecord] = field(default_factory=dict)
    blocked: list[str] = field(default_factory=list)
    resolutions: list[dict[str, Any]] = field(default_factory=list)
    started_at: str | None = None
    updated_at: str | None = None
    records: int = 0

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def awaiting_verification(self) -> list[str]:
        """Succeeded steps whose tool requires verification and that no ``step_verified`` links to yet."""
        return [p for p, s in self.steps.items() if s.status == "succeeded" and s.requires_verification and s.verification is None]

    @property
    def completed(self) -> bool:
        """Succeeded, and every step that requires verification verified."""
        return self.status == "succeeded" and not self.awaiting_verification()

    def uncertain_steps(self) -> list[str]:
        """Paths of steps whose effect is uncertain. Meaningful when no process is running the run
        (whoever holds the run's lock decides: a live runner's started step is simply running)."""
        return [p for p, s in self.steps.items() if s.is_uncertain]

    def summary(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "status": self.status,
            "steps_settled": sum(1 for s in self.steps.values() if s.status == "succeeded"),
            "uncertain": self.uncertain_steps() if self.status in ("running", "blocked") else [],
            "awaiting_verification": self.awaiting_verification(),
            "completed": self.completed,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
        }

    def snapshot(self) -> dict[str, Any]:
        """Every field, as JSON (what a ``run_snapshot`` record holds; :func:`apply` restores it)."""
        return {
            "workflow": self.workflow, "digest": self.digest, "input": self.input, "status": self.status,
            "result": self.result, "error": self.error, "steps": [dataclasses.asdict(s) for s in self.steps.values()],
            "blocked": list(self.blocked), "resolutions": list(self.resolutions), "started_at": self.started_at,
            "updated_at": self.updated_at, "records": self.records,
        }

    def to_dict(self) -> dict[str, Any]:
        out = self.summary()
        out.update({
            "digest": self.digest,
            "input": self.input,
            "steps": [s.to_dict() for s in self.steps.values()],
            "blocked": list(self.blocked),
            "resolutions": list(self.resolutions),
            "records": self.records,
        })
        if self.status == "succeeded":
            out["result"] = self.result
        if self.error is not None:
            out["error"] = self.error
        return out


# -- the fold ---------------------------------------------------------------


def apply(state: WorkflowRunState, rec: Any) -> None:
    """Fold one record (anything with ``type``, ``data``, ``time``) into ``state``.

    Raises ``KeyError``/``TypeError``/``ValueError`` for a malformed record;
    :func:`fold_error` turns that into :class:`RunCorrupt`.
    """
    fn = _APPLY.get(rec.type)
    if fn is None:
        raise ValueError(f"unknown record type {rec.type!r} (written by a newer version?)")
    if rec.type == "run_snapshot":
        _run_snapshot(state, rec.data)
        return
    if rec.type != "run_started" and state.status == "new":
        raise ValueError(f"{rec.type!r} record before run_started")
    if state.terminal and rec.type != "step_verified":
        raise ValueError(f"{rec.type!r} record after run_finished")
    fn(state, rec.data)
    if rec.type == "run_started":
        state.started_at = rec.time
    state.records += 1
    state.updated_at = rec.time


def _run_started(s: WorkflowRunState, d: dict[str, Any]) -> None:
    if d["run_id"] != s.run_id:
        raise ValueError(f"run_started names run {d['run_id']!r}, not {s.run_id!r}")
    s.workflow = _str(d["workflow"])
    s.digest = _str(d["digest"])
    s.input = d["input"]
    s.status = "running"


def _step_started(s: WorkflowRunState, d: dict[str, Any]) -> None:
    p = _str(d["step"])
    s.steps[p] = StepRecord(step=p, name=_str(d["name"]), status="started", tool=d.get("tool"), params=d.get("params"))


def _step_settled(s: WorkflowRunState, d: dict[str, Any]) -> None:
    p = _str(d["step"])
    status = d["status"]
    if status not in ("succeeded", "failed", "cancelled"):
        raise ValueError(f"step_settled with status {status!r}")
    prior = s.steps.get(p)
    s.steps[p] = StepRecord(
        step=p, name=_str(d["name"]), status=status, tool=prior.tool if prior else d.get("tool"),
        params=prior.params if prior else None, result=d.get("result"), error=d.get("error"),
        receipt_id=d.get("receipt_id"), certainty=d.get("certainty"), uncertain=bool(d.get("uncertain", False)),
        rerun=bool(d.get("rerun", False)), rerun_of=d.get("rerun_of"),
        requires_verification=bool(d.get("requires_verification", False)),
    )


def _step_verified(s: WorkflowRunState, d: dict[str, Any]) -> None:
    p = _str(d["step"])
    step = s.steps.get(p)
    if step is None or step.status != "succeeded" or not step.requires_verification:
        raise ValueError(f"step_verified for step {p!r}, which is not a succeeded step that requires verification")
    if step.verification is None:  # the first one counts
        step.verification = {"receipt_id": _str(d["receipt_id"]), "tool": d.get("tool"), "by": d.get("by")}


def _run_blocked(s: WorkflowRunState, d: dict[str, Any]) -> None:
    steps = d["steps"]
    if not isinstance(steps, list) or not all(isinstance(x, str) for x in steps):
        raise TypeError("run_blocked.steps must be a list of step paths")
    s.status = "blocked"
    s.blocked = list(steps)


def _step_resolved(s: WorkflowRunState, d: dict[str, Any]) -> None:
    p = _str(d["step"])
    applied = d["applied"]
    if not isinstance(applied, bool):
        raise TypeError("step_resolved.applied must be a boolean")
    prior = s.steps.get(p)
    s.resolutions.append({"step": p, "applied": applied, "by": d.get("by"),
                          **({"rerun": True, "rerun_of": d.get("rerun_of")} if d.get("rerun") else {})})
    if applied:
        s.steps[p] = StepRecord(
            step=p, name=prior.name if prior else p, status="succeeded", tool=prior.tool if prior else None,
            result=d.get("result"), receipt_id=prior.receipt_id if prior else None, resolved_by=d.get("by"),
        )
    else:
        s.steps.pop(p, None)  # the effect did not happen: the step runs again
    s.blocked = [x for x in s.blocked if x != p]
    if s.status == "blocked" and not s.blocked:
        s.status = "running"


def _run_finished(s: WorkflowRunState, d: dict[str, Any]) -> None:
    status = d["status"]
    if status not in TERMINAL:
        raise ValueError(f"run_finished with status {status!r}")
    s.status = status
    s.result = d.get("result")
    s.error = d.get("error")
    s.blocked = []


def _run_snapshot(s: WorkflowRunState, d: dict[str, Any]) -> None:
    snap = d["state"]
    if not isinstance(snap, dict):
        raise TypeError("run_snapshot.state must be an object")
    status = _str(snap["status"])
    if status not in TERMINAL and status not in ("running", "blocked"):
        raise ValueError(f"run_snapshot with status {status!r}")
    steps = {}
    for step in snap["steps"]:
        rec = StepRecord(**step)
        steps[_str(rec.step)] = rec
    s.workflow, s.digest, s.input, s.status = _str(snap["workflow"]), _str(snap["digest"]), snap["input"], status
    s.result, s.error, s.steps = snap.get("result"), snap.get("error"), steps
    s.blocked, s.resolutions = list(snap["blocked"]), list(snap["resolutions"])
    s.started_at, s.updated_at, s.records = snap.get("started_at"), snap.get("updated_at"), int(snap.get("records", 0))


def fold(states: dict[str, WorkflowRunState], rec: Any) -> WorkflowRunState | None:
    """Route one record of the shared journal to its run's state (created on its first record) and
    :func:`apply` it. ``compacted`` belongs to no run: ``None``."""
    if rec.type == "compacted":
        return None
    run_id = _str(rec.data["run_id"])
    state = states.get(run_id)
    if state is None:
        state = states[run_id] = WorkflowRunState(run_id=run_id)
    apply(state, rec)
    return state


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__}")
    return v


_APPLY = {
    "run_started": _run_started,
    "step_started": _step_started,
    "step_settled": _step_settled,
    "run_blocked": _run_blocked,
    "step_resolved": _step_resolved,
    "run_finished": _run_finished,
    "run_snapshot": _run_snapshot,
    "step_verified": _step_verified,
}

#: record types of format version 1 (docs/formats/workflow-runs.md)
RECORD_TYPES = (*_APPLY, "compacted")


def fold_error(path: Path | str, rec: Any, exc: Exception) -> RunCorrupt:
    """``path``: a file (its record has a ``line``), or a database's ``where`` string (its rows have none)."""
    if isinstance(path, str):
        return RunCorrupt(f"the workflow runs in {path} are unreadable at record seq {rec.seq}: {type(exc).__name__}: "
                          f"{exc}; they are left untouched", details={"seq": rec.seq})
    line = getattr(rec, "line", -1)
    return RunCorrupt(
        f"workflow run journal {str(path)!r} is unreadable at record seq {rec.seq} (line {line}): "
        f"{type(exc).__name__}: {exc}; it is left untouched",
        details={"path": str(path), "seq": rec.seq, "line": line},
    )


def snapshot(states: dict[str, WorkflowRunState]) -> list[tuple[str, dict[str, Any]]]:
    """A ``run_snapshot`` per run that has a record (what a compaction that drops nothing writes)."""
    return [("run_snapshot", {"run_id": s.run_id, "state": s.snapshot()}) for s in states.values() if s.status != "new"]


def _route(states: dict[str, WorkflowRunState], rec: Any) -> None:
    fold(states, rec)


#: The run journal (file or database rows) as a core record stream: the one fold, live and at replay. A record
#: type this version does not know is refused (the journal is unreadable, :class:`RunCorrupt`): a run's
#: state decides whether a step's effect is repeated, so it is never folded from part of its records.
WORKFLOW_RUNS: RecordStream[dict[str, WorkflowRunState]] = RecordStream(
    "workflow-runs", kind=KIND, types=_APPLY, new_state=dict, apply=_route, unknown=UnknownRecords.REFUSE,
    meta={"format": FORMAT, "version": VERSION}, snapshot=snapshot, malformed=fold_error)


#: The largest step result (canonical UTF-8 JSON) a durable run journals, by default.
MAX_RESULT_BYTES = 4 * 1024 * 1024


def json_copy(value: Any, path: str, name: str, limit: int = MAX_RESULT_BYTES) -> Any:
    """The value as a journal will give it back (tuples become lists), or :class:`StepOutputInvalid`
    (no JSON form, or more than ``limit`` bytes)."""
    try:
        text = canonical_json(value)
        size = len(to_utf8(text, value))
    except NonJsonValue as exc:
        raise StepOutputInvalid(
            f"step {path} ({name}) returned a value with no JSON form: {exc.message}",
            details={"step": path, "name": name, "cause": exc.code},
        ) from None
    if size > limit:
        raise StepOutputInvalid(
            f"step {path} ({name}) returned {size} bytes of JSON, over the {limit}-byte limit of a durable run's "
            "step result; keep large outputs elsewhere (an artifact) and return their id",
            details={"step": path, "name": name, "size": size, "limit": limit},
        )
    return json.loads(text)


# -- the live writer --------------------------------------------------------


class RunJournal:
    """The records of one running run: built here, appended to its locked log, folded by :func:`apply`."""

    __slots__ = ("log", "state", "max_result_bytes", "_pending", "_effect_pending")

    def __init__(self, log: Any, state: WorkflowRunState, *, max_result_bytes: int = MAX_RESULT_BYTES) -> None:
        """``log``: the open stream (``core.records.FileRecordLog`` or ``TableRecordLog`` of
        :data:`WORKFLOW_RUNS`) whose state holds ``state`` under its run id."""
        self.log = log
        self.state = state
        self.max_result_bytes = max_result_bytes
        self._pending: list[tuple[str, dict[str, Any]]] = []
        # whether _pending holds the outcome of a non-read tool step (it must
        # be durable before anything slow runs, or a crash makes it uncertain)
        self._effect_pending = False

    async def _append(self, records: list[tuple[str, dict[str, Any]]]) -> None:
        # The stream's log folds each record into its run's state (this ``state``) once it is durable,
        # shielded from the caller's cancellation, so state and records cannot diverge.
        rid = self.state.run_id
        await self.log.append_many([(t, {"run_id": rid, **d}) for t, d in records])

    async def flush(self) -> None:
        """Make every buffered record durable (one fsync)."""
        if self._pending:
            pending, self._pending = self._pending, []
            self._effect_pending = False
            await self._append(pending)

    def begin_step(self, path: str, name: str, tool: str, params: Any) -> asyncio.Future[None]:
        """A non-read tool step's start: its ``step_started`` record, with everything buffered, handed
        to the log now; the returned future resolves once it is durable. The caller makes the tool's
        handler wait for it (so the call never runs before its start is on disk) while the executor
        persists its own start record: the two fsyncs overlap instead of adding up."""
        self._pending.append(("step_started", {"step": path, "name": name, "tool": tool, "params": params}))
        pending, self._pending = self._pending, []
        self._effect_pending = False
        return asyncio.ensure_future(self._append(pending))

    def started(self, data: dict[str, Any]) -> None:
        """Buffer ``run_started``: it becomes durable with the run's first fsync. A crash before that
        leaves a file with a header only: a run that never started (``run`` starts it afresh)."""
        self._pending.append(("run_started", data))

    async def before_step(self, path: str, name: str, tool: str | None = None, params: Any = None, *, effect: bool) -> None:
        """Before a tool or LLM step. A non-read tool (``effect``): its start record, and everything
        buffered, durable before the call is made. Otherwise: flush only if an effectful step's
        outcome is buffered (reads' and transforms' results may wait: they are safe to recompute)."""
        if effect:
            self._pending.append(("step_started", {"step": path, "name": name, "tool": tool, "params": params}))
            await self.flush()
        elif self._effect_pending:
            await self.flush()

    def _rerun(self, path: str, data: dict[str, Any]) -> None:
        """A step the runner re-runs (its last resolution was an idempotent re-run) says so when it settles."""
        last = next((r for r in reversed(self.state.resolutions) if r["step"] == path), None)
        if last is not None and last.get("rerun"):
            data["rerun"] = True
            data["rerun_of"] = last.get("rerun_of")

    def succeeded(self, path: str, name: str, result: Any, receipt: Any = None, *, effect: bool = False,
                  attempt: int = 1, requires_verification: bool = False) -> Any:
        """Buffer a step's result; returns its JSON copy (what a replay would see)."""
        value = json_copy(result, path, name, self.max_result_bytes)
        data: dict[str, Any] = {"step": path, "name": name, "status": "succeeded", "result": value}
        self._rerun(path, data)
        if requires_verification:
            data["requires_verification"] = True
        if attempt > 1:
            data["attempt"] = attempt
        if receipt is not None:
            data["receipt_id"] = receipt.receipt_id
            data["certainty"] = receipt.certainty
        self._pending.append(("step_settled", data))
        self._effect_pending |= effect
        return value

    def failed(self, path: str, name: str, status: str, error: dict[str, Any], receipt: Any = None, *,
               uncertain: bool = False, effect: bool = False, attempt: int = 1) -> None:
        data: dict[str, Any] = {"step": path, "name": name, "status": status, "error": error}
        self._rerun(path, data)
        if attempt > 1:
            data["attempt"] = attempt
        if receipt is not None:
            data["receipt_id"] = receipt.receipt_id
            data["certainty"] = receipt.certainty
        if uncertain:
            data["uncertain"] = True
        self._pending.append(("step_settled", data))
        self._effect_pending |= effect

    async def blocked(self, steps: list[str], reason: str) -> None:
        await self._append([("run_blocked", {"steps": steps, "reason": reason})])

    async def resolved(self, path: str, *, applied: bool, result: Any, by: str | None) -> None:
        data: dict[str, Any] = {"step": path, "applied": applied, "by": by}
        if applied:
            data["result"] = result
        await self._append([("step_resolved", data)])

    async def verified(self, path: str, *, receipt_id: str, tool: str | None, by: str | None) -> None:
        await self._append([("step_verified", {"step": path, "receipt_id": receipt_id, "tool": tool, "by": by})])

    async def rerun(self, paths: list[str]) -> None:
        """Uncertain steps of idempotent tools: run them again (one record each, one fsync)."""
        await self._append([("step_resolved", {"step": p, "applied": False, "by": None, "rerun": True,
                                                "rerun_of": self.state.steps[p].receipt_id}) for p in paths])

    async def finished(self, status: str, *, result: Any = None, error: dict[str, Any] | None = None) -> None:
        data: dict[str, Any] = {"status": status}
        if status == "succeeded":
            data["result"] = result
        if error is not None:
            data["error"] = error
        pending, self._pending = self._pending, []
        await self._append([*pending, ("run_finished", data)])


__all__ = ["FORMAT", "KIND", "MAX_RESULT_BYTES", "RECORD_TYPES", "RunJournal", "WORKFLOW_RUNS", "snapshot", "WorkflowRunState", "StepRecord", "TERMINAL",
           "V1_FORMAT", "V1_KIND", "V1_VERSION", "VERSION", "apply", "fold", "fold_error", "json_copy"]
