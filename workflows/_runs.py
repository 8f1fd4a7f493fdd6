"""Durable runs: start, resume, resolve, list and show workflow runs kept in a data directory.

Each run has its own journal (format: ``_runlog.py``, docs/formats/workflow-runs.md).
Whoever runs a run holds its journal's flock, so one run never runs in two
places; opening it replays the journal through the one fold (``_runlog.apply``)
and the engine skips every settled step. A tool step that started and never
settled (the process died mid-call) makes the run *blocked*: it is never
re-run blindly; an operator resolves it (:meth:`WorkflowRuns.resolve`,
``openfunctions-mcp workflows resolve``) and resumes.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from openfunctions.core import canonical_json, to_utf8
from openfunctions.core import ToolExecutionContext
from openfunctions.core.errors import JournalCorrupt, JournalError, JournalLocked, NonJsonValue, OpenFunctionsError
from openfunctions.core.journal import JournalLog, read_records
from openfunctions.core import new_id

from ._errors import (
    InvalidInput,
    InvalidRunId,
    NonDeterministic,
    NotUncertain,
    RunBlocked,
    RunBusy,
    RunCorrupt,
    RunNotFound,
    WorkflowChanged,
    WorkflowDefinitionError,
    WorkflowError,
    WorkflowUnknown,
)
from ._runlog import FORMAT, KIND, MAX_RESULT_BYTES, VERSION, RunJournal, RunState, apply, fold_error, json_copy
from ._workflow import Workflow

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")


def runs_dir(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / "workflows" / "runs"


def run_path(root: Path, run_id: str) -> Path:
    """``root/<sha256(run_id)[:32]>.jsonl``: a safe file name for any id."""
    return root / (hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:32] + ".jsonl")


def check_run_id(run_id: Any) -> str:
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        shown = run_id if isinstance(run_id, str) else type(run_id).__name__
        raise InvalidRunId(
            f"run id {str(shown)[:80]!r} is invalid: use 1-128 characters of A-Z, a-z, 0-9, '_', '.', ':', '-' "
            "starting with a letter or digit",
            details={"run_id": str(shown)[:200]},
        )
    return run_id


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: ``status`` ``succeeded`` (``result``), ``failed`` (``error``) or ``cancelled``."""

    run_id: str
    workflow: str
    status: str
    result: Any = None
    error: dict[str, Any] | None = None
    resumed: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    def unwrap(self) -> Any:
        """The result, or a :class:`WorkflowError` carrying the recorded error's code and message."""
        if self.ok:
            return self.result
        err = self.error or {"code": "workflow_cancelled", "message": f"run {self.run_id} was cancelled"}
        exc = WorkflowError(f"run {self.run_id} {self.status}: {err.get('message')}",
                            details={"run_id": self.run_id, **(err.get("details") or {})})
        exc.code = err.get("code") or exc.code
        raise exc

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"run_id": self.run_id, "workflow": self.workflow, "status": self.status, "resumed": self.resumed}
        if self.ok:
            out["result"] = self.result
        if self.error is not None:
            out["error"] = self.error
        return out


class WorkflowRuns:
    """The durable runs under ``<data_dir>/workflows/runs/``.

    ``workflows``: the workflows this process can run or resume, by name.
    ``registry``/``adapter``: defaults for runs whose workflow has none bound.
    ``max_result_bytes``: the largest step result (and run input) journaled, as canonical UTF-8 JSON;
    a larger one fails the step (``StepOutputInvalid``) or the run (``InvalidInput``).
    """

    def __init__(self, data_dir: str | os.PathLike[str], *, workflows: Iterable[Workflow] = (), registry: Any = None,
                 adapter: Any = None, max_result_bytes: int = MAX_RESULT_BYTES) -> None:
        self.data_dir = Path(data_dir)
        self.max_result_bytes = max_result_bytes
        self.root = runs_dir(self.data_dir)
        self.registry = registry
        self.adapter = adapter
        self._workflows: dict[str, Workflow] = {}
        for wf in workflows:
            self.register(wf)

    def register(self, workflow: Workflow) -> Workflow:
        if not isinstance(workflow, Workflow):
            raise WorkflowDefinitionError(f"register() takes a Workflow, got {type(workflow).__name__}")
        if workflow.name is None:
            raise WorkflowDefinitionError("a durable workflow needs a name (pipe(..., name=...) or .named(...)): "
                                          "a run finds its workflow by name when it resumes")
        known = self._workflows.get(workflow.name)
        if known is not None and known is not workflow and known.digest != workflow.digest:
            raise WorkflowDefinitionError(f"another workflow with different steps is already registered as {workflow.name!r}")
        self._workflows[workflow.name] = workflow
        return workflow

    @property
    def workflows(self) -> dict[str, Workflow]:
        return dict(self._workflows)

    # -- running ----------------------------------------------------------------

    async def run(self, workflow: Workflow, input: Any = None, *, run_id: str | None = None,
                  context: ToolExecutionContext | None = None, registry: Any = None, adapter: Any = None) -> RunOutcome:
        """Run ``workflow`` durably and return how it ended.

        ``run_id`` (default: a new ``wfr_…`` id) is an idempotency key: if that run exists, its
        recorded outcome is returned (finished) or it is resumed (interrupted) — with the same
        workflow, never a second run. Raises :class:`RunBlocked` for a run with an uncertain step,
        :class:`RunBusy` if another process runs it, :class:`InvalidInput` for non-JSON input.
        A step failure does not raise: the outcome says ``failed``; cancelling the caller records
        ``cancelled`` and re-raises.
        """
        self.register(workflow)
        run_id = check_run_id(run_id) if run_id is not None else new_id("wfr")
        try:
            text = canonical_json(input)
            size = len(to_utf8(text, input))
        except NonJsonValue as exc:
            raise InvalidInput(f"workflow {workflow.name!r}: the input has no JSON form: {exc.message}",
                               details={"workflow": workflow.name}) from None
        if size > self.max_result_bytes:
            raise InvalidInput(f"workflow {workflow.name!r}: the input is {size} bytes of JSON, over the "
                               f"{self.max_result_bytes}-byte limit", details={"workflow": workflow.name, "size": size})
        import json

        input_copy = json.loads(text)
        log, state = await self._open(run_id, create_for=workflow)
        try:
            journal = RunJournal(log, state, max_result_bytes=self.max_result_bytes)
            if state.status == "new":  # a new run, or one that crashed before its first record
                journal.started({"run_id": run_id, "workflow": workflow.name, "digest": workflow.digest, "input": input_copy})
                return await self._drive(journal, workflow, input_copy, context, registry, adapter, resumed=False)
            if state.workflow != workflow.name:
                raise WorkflowChanged(
                    f"run {run_id} belongs to workflow {state.workflow!r}, not {workflow.name!r}",
                    details={"run_id": run_id, "workflow": state.workflow},
                )
            return await self._drive(journal, workflow, state.input, context, registry, adapter, resumed=True)
        finally:
            await _close(log)

    async def resume(self, run_id: str, *, context: ToolExecutionContext | None = None, registry: Any = None,
                     adapter: Any = None) -> RunOutcome:
        """Resume an interrupted run after its last settled step (a finished run: its outcome).

        Raises :class:`RunNotFound`, :class:`RunBusy`, :class:`RunCorrupt`, :class:`RunBlocked`,
        :class:`WorkflowUnknown` (not registered here), :class:`WorkflowChanged` (its steps changed).
        """
        log, state = await self._open(check_run_id(run_id))
        try:
            if state.status == "new":
                raise RunNotFound(f"run {run_id} never started (its journal holds no record): start it again with run()",
                                  details={"run_id": run_id})
            journal = RunJournal(log, state, max_result_bytes=self.max_result_bytes)
            wf = self._workflows.get(state.workflow)
            if wf is None and not state.terminal:
                raise WorkflowUnknown(
                    f"run {run_id} is a run of workflow {state.workflow!r}, which is not registered here "
                    f"(known: {', '.join(sorted(self._workflows)) or 'none'})",
                    details={"run_id": run_id, "workflow": state.workflow},
                )
            return await self._drive(journal, wf, state.input, context, registry, adapter, resumed=True)  # type: ignore[arg-type]
        finally:
            await _close(log)

    async def resume_interrupted(self) -> list[RunOutcome | WorkflowError]:
        """On start: resume every unfinished run of a registered workflow, one after another.

        Returns each run's outcome, or the error that stopped it (blocked, busy, corrupt, changed):
        a blocked run waits for :meth:`resolve`; it is reported, not retried.
        """
        out: list[RunOutcome | WorkflowError] = []
        for summary in self.list():
            if summary.get("status") not in ("running", "blocked") or summary.get("workflow") not in self._workflows:
                continue
            try:
                out.append(await self.resume(summary["run_id"]))
            except WorkflowError as exc:
                out.append(exc)
        return out

    async def _drive(self, journal: RunJournal, wf: Workflow | None, input: Any, context: ToolExecutionContext | None,
                     registry: Any, adapter: Any, *, resumed: bool) -> RunOutcome:
        state = journal.state
        if state.terminal:
            return _outcome(state, resumed=False)
        assert wf is not None
        if resumed and state.digest != wf.digest:
            raise WorkflowChanged(
                f"run {state.run_id} was started by a different version of workflow {wf.name!r} "
                f"(digest {state.digest}, now {wf.digest}); register the old version to finish it",
                details={"run_id": state.run_id, "workflow": wf.name, "recorded": state.digest, "current": wf.digest},
            )
        uncertain = state.uncertain_steps()
        if uncertain:
            if state.status != "blocked" or state.blocked != uncertain:
                await journal.blocked(uncertain, "a tool step with a non-read effect started and never settled")
            raise _blocked_error(state)
        ex = wf.executor(registry=registry if registry is not None else self.registry if wf.registry is None else None,
                         adapter=adapter if adapter is not None else self.adapter if wf.adapter is None else None,
                         context=context, journal=journal)
        cancelled = anyio.get_cancelled_exc_class()
        try:
            result = await wf.root.run(ex, input)
        except cancelled:
            with anyio.CancelScope(shield=True):
                await journal.finished("cancelled", error={"code": "cancelled", "message": "the run was cancelled"})
            raise
        except OpenFunctionsError as exc:
            if isinstance(exc, JournalError):
                raise  # the run cannot be recorded: leave it unfinished (resumable, or blocked)
            if isinstance(exc, (WorkflowDefinitionError, NonDeterministic)):
                # Not the run's failure but the code's: record what settled, leave the run
                # unfinished (it resumes once the code or configuration is fixed).
                with anyio.CancelScope(shield=True):
                    await journal.flush()
                raise
            await journal.finished("failed", error=exc.to_dict())
            return _outcome(state, resumed=resumed)
        await journal.finished("succeeded", result=result)
        return _outcome(state, resumed=resumed)

    # -- operator ---------------------------------------------------------------

    async def resolve(self, run_id: str, step: str, *, applied: bool, result: Any = None, by: str | None = None) -> RunState:
        """Answer for an uncertain step after checking its effect by other means.

        ``applied=True``: the effect happened; ``result`` (JSON) becomes the step's result and the
        run continues after it. ``applied=False``: it did not happen; the step runs again on resume.
        Raises :class:`NotUncertain` if ``step`` is not an uncertain step of that run.
        """
        log, state = await self._open(check_run_id(run_id))
        try:
            rec = state.steps.get(step)
            if state.terminal or rec is None or not rec.is_uncertain:
                raise NotUncertain(
                    f"step {step!r} of run {run_id} is not uncertain (uncertain steps: {state.uncertain_steps() or 'none'})",
                    details={"run_id": run_id, "step": step, "uncertain": state.uncertain_steps()},
                )
            value = json_copy(result, step, rec.name, self.max_result_bytes) if applied else None
            journal = RunJournal(log, state, max_result_bytes=self.max_result_bytes)
            if state.status != "blocked":
                await journal.blocked(state.uncertain_steps(), "resolution requested")
            await journal.resolved(step, applied=applied, result=value, by=by)
            return state
        finally:
            await _close(log)

    # -- reading (no lock: works while a run is running) -------------------------

    def show(self, run_id: str) -> RunState:
        """The run's state as its journal says now (lock-free). Raises RunNotFound, RunCorrupt."""
        path = run_path(self.root, check_run_id(run_id))
        if not os.path.lexists(path):
            raise RunNotFound(f"no workflow run {run_id!r} in {str(self.root)!r} (see `openfunctions-mcp workflows list`)",
                              details={"run_id": run_id})
        return _read_state(path, run_id)

    def list(self) -> list[dict[str, Any]]:
        """A summary per run (oldest first); an unreadable file is listed with ``status: corrupt``."""
        if not self.root.is_dir():
            return []
        out: list[dict[str, Any]] = []
        for _, path in sorted(self._run_files()):
            try:
                out.append(_read_state(path, None).summary())
            except RunCorrupt as exc:
                out.append({"run_id": None, "status": "corrupt", "path": str(path), "error": exc.message})
        return out

    # -- files ------------------------------------------------------------------

    def _run_files(self) -> list[tuple[float, Path]]:
        found = []
        for entry in os.scandir(self.root):
            if not entry.name.endswith(".jsonl") or not entry.is_file(follow_symlinks=False):
                continue  # lock files, .broken copies, symlinks (never followed)
            try:
                found.append((entry.stat(follow_symlinks=False).st_mtime, Path(entry.path)))
            except FileNotFoundError:
                continue  # removed meanwhile
        return found

    async def _open(self, run_id: str, *, create_for: Workflow | None = None) -> tuple[JournalLog, RunState]:
        path = run_path(self.root, run_id)
        if create_for is None and not os.path.lexists(path):
            raise RunNotFound(f"no workflow run {run_id!r} in {str(self.root)!r} (see `openfunctions-mcp workflows list`)",
                              details={"run_id": run_id})
        state = RunState(run_id=run_id)
        meta = {"format": FORMAT, "version": VERSION, "run_id": run_id, "workflow": create_for.name if create_for else None}
        folded: list[Any] = []
        try:
            log = await JournalLog.open(path, kind=KIND, meta=meta, on_record=folded.append)
        except JournalLocked as exc:
            raise RunBusy(f"run {run_id} is being run by another process or task ({exc.message})",
                          details={"run_id": run_id, "path": str(path)}) from None
        except JournalError as exc:
            raise RunCorrupt(f"workflow run journal {str(path)!r} cannot be opened: {exc.message}; it is left untouched",
                             details={"run_id": run_id, "path": str(path), "cause": exc.code}) from None
        try:
            _check_header(path, log.header.meta, run_id)
            for rec in folded:
                try:
                    apply(state, rec)
                except (KeyError, TypeError, ValueError) as exc:
                    raise fold_error(path, rec, exc) from None
        except BaseException:
            await _close(log)
            raise
        return log, state


def _check_header(path: Path, meta: Any, run_id: str | None) -> None:
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise RunCorrupt(f"{str(path)!r} is not a workflow run journal (header meta {meta!r})", details={"path": str(path)})
    if meta.get("version") != VERSION:
        raise RunCorrupt(f"{str(path)!r} has workflow-run format version {meta.get('version')!r}; this build reads {VERSION}",
                         details={"path": str(path)})
    if run_id is not None and meta.get("run_id") != run_id:
        raise RunCorrupt(f"{str(path)!r} belongs to run {meta.get('run_id')!r}, not {run_id!r}", details={"path": str(path)})


def _read_state(path: Path, run_id: str | None) -> RunState:
    try:
        records = read_records(path)
        header_meta = _header_meta(path)
        _check_header(path, header_meta, run_id)
        state = RunState(run_id=header_meta["run_id"], workflow=header_meta.get("workflow") or "")
        for rec in records:
            try:
                apply(state, rec)
            except (KeyError, TypeError, ValueError) as exc:
                raise fold_error(path, rec, exc) from None
        return state
    except JournalCorrupt as exc:
        raise RunCorrupt(f"workflow run journal {str(path)!r} is corrupt: {exc.message}",
                         details={"path": str(path), "cause": exc.code}) from None
    except (JournalError, OSError) as exc:
        msg = exc.message if isinstance(exc, JournalError) else (exc.strerror or str(exc))
        raise RunCorrupt(f"workflow run journal {str(path)!r} cannot be read: {msg}", details={"path": str(path)}) from None


def _header_meta(path: Path) -> Any:
    import json

    with open(path, "rb") as f:
        line = f.readline(1 << 20)
    try:
        return json.loads(line).get("meta")
    except (ValueError, AttributeError):
        raise RunCorrupt(f"{str(path)!r} has no readable journal header", details={"path": str(path)}) from None


def _blocked_error(state: RunState) -> RunBlocked:
    steps = state.uncertain_steps()
    shown = ", ".join(f"{p} ({state.steps[p].name}{', tool ' + state.steps[p].tool if state.steps[p].tool else ''})" for p in steps)
    return RunBlocked(
        f"run {state.run_id} is blocked: step(s) {shown} started and never settled, so their effect is uncertain; "
        f"check the effect, then `openfunctions-mcp workflows resolve {state.run_id} STEP --applied --result JSON` "
        f"or `--not-applied`, and resume",
        details={"run_id": state.run_id, "steps": steps},
    )


def _outcome(state: RunState, *, resumed: bool) -> RunOutcome:
    return RunOutcome(run_id=state.run_id, workflow=state.workflow, status=state.status, result=state.result,
                      error=state.error, resumed=resumed)


async def _close(log: JournalLog) -> None:
    with anyio.CancelScope(shield=True):
        await log.close()


__all__ = ["RunOutcome", "WorkflowRuns", "check_run_id", "run_path", "runs_dir"]
