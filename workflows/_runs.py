"""Durable runs: start, resume, resolve, list and show workflow runs kept in a data directory.

Every run of a data directory is kept in one journal (format: ``_runlog.py``,
docs/formats/workflow-runs.md). One process at a time writes it (the core
journal's flock); inside that process a run is claimed by the task running
it, so one run never runs in two places. Opening the journal replays it
through the one fold (``_runlog.fold``/``apply``) and the engine skips every
settled step. A tool step that started and never
settled (the process died mid-call) makes the run *blocked*: it is never
re-run blindly; an operator resolves it (:meth:`WorkflowRuns.resolve`,
``openfunctions-mcp workflows resolve``) and resumes.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import structlog

from openfunctions.core import ToolExecutionContext, canonical_json, new_id, redact_dsn, to_utf8
from openfunctions.core.errors import JournalCorrupt, JournalError, JournalLocked, NonJsonValue, OpenFunctionsError
from openfunctions.core.files import fsync_dir
from openfunctions.core.journal import read_records
from openfunctions.core.records import FileRecordLog, TableRecordLog, replay

from ._errors import (
    InvalidInput,
    InvalidRunId,
    NonDeterministic,
    NotUncertain,
    RunBlocked,
    RunBusy,
    RunCorrupt,
    RunStoreUnavailable,
    StepInterrupted,
    VerificationRefused,
    WorkflowChanged,
    WorkflowDefinitionError,
    WorkflowError,
    WorkflowRunNotFound,
    WorkflowUnknown,
)
from ._runlog import (
    FORMAT,
    MAX_RESULT_BYTES,
    V1_FORMAT,
    V1_VERSION,
    VERSION,
    WORKFLOW_RUNS,
    RunJournal,
    WorkflowRunState,
    apply,
    fold_error,
    json_copy,
)
from ._workflow import Workflow

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$")


log = structlog.get_logger("openfunctions.workflows")

#: Retention defaults: finished runs kept (the newest), and for how long (seconds).
KEEP_RUNS = 1000
KEEP_SECONDS = 30 * 24 * 3600
#: While the journal is held open, age-based retention is looked at no more often than this (seconds).
AGE_CHECK_SECONDS = 60.0


def journal_path(data_dir: str | os.PathLike[str]) -> Path:
    """``<data-dir>/workflows/runs.journal``: the one journal of every run of a data directory."""
    return Path(data_dir) / "workflows" / "runs.journal"


def runs_dir(data_dir: str | os.PathLike[str]) -> Path:
    """Where format version 1 kept one file per run (migrated on open)."""
    return Path(data_dir) / "workflows" / "runs"


def run_path(root: Path, run_id: str) -> Path:
    """Version 1's file of a run: ``root/<sha256(run_id)[:32]>.jsonl``."""
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
    #: succeeded steps whose tool requires verification, not verified yet (``WorkflowRuns.verify``)
    awaiting_verification: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    @property
    def completed(self) -> bool:
        """Succeeded, and nothing awaits verification."""
        return self.ok and not self.awaiting_verification

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
        if self.awaiting_verification:
            out["awaiting_verification"] = list(self.awaiting_verification)
        return out


class WorkflowRuns:
    """The durable runs of ``data_dir``, kept in ``<data_dir>/workflows/runs.journal`` (or, with
    ``database=URL``, rows of ``space`` in PostgreSQL; with neither, the runs of a served workflow
    tool, placed by the server that serves it: see :meth:`place`).

    ``workflows``: the workflows this process can run or resume, by name.
    ``registry``/``adapter``: defaults for runs whose workflow has none bound.
    ``max_result_bytes``: the largest step result (and run input) journaled, as canonical UTF-8 JSON;
    a larger one fails the step (``StepOutputInvalid``) or the run (``InvalidInput``).
    ``keep_runs``/``keep_seconds``: retention of *finished* runs (the newest ``keep_runs``, none older
    than ``keep_seconds``; ``None``: no limit); running and blocked runs, and succeeded runs awaiting a
    verification, are always kept.
    ``compact_every``: while open, compact once that many finished runs are past retention
    (default: a quarter of ``keep_runs``, at least 16).

    The journal is opened by each operation and closed after it, unless the instance is held open:
    ``async with WorkflowRuns(...) as runs`` or :meth:`open`/:meth:`close` (a server does this
    through :meth:`start`, which also resumes interrupted runs). Holding it open saves reading the
    journal per operation; while one process holds it, another gets :class:`RunBusy`.
    """

    def __init__(self, data_dir: str | os.PathLike[str] | None = None, *, database: str | None = None,
                 space: str = "default", workflows: Iterable[Workflow] = (), registry: Any = None,
                 adapter: Any = None, max_result_bytes: int = MAX_RESULT_BYTES, keep_runs: int | None = KEEP_RUNS,
                 keep_seconds: float | None = KEEP_SECONDS, compact_every: int | None = None) -> None:
        if keep_runs is not None and (not isinstance(keep_runs, int) or keep_runs < 0):
            raise WorkflowDefinitionError(f"keep_runs must be a non-negative integer or None, got {keep_runs!r}")
        if keep_seconds is not None and (not isinstance(keep_seconds, (int, float)) or keep_seconds < 0):
            raise WorkflowDefinitionError(f"keep_seconds must be a non-negative number or None, got {keep_seconds!r}")
        if data_dir is not None and database is not None:
            raise WorkflowDefinitionError("WorkflowRuns takes a data directory or database=URL, not both "
                                          "(neither: the serving host's, see place())")
        if not isinstance(space, str) or not RUN_ID_RE.match(space):
            raise WorkflowDefinitionError(f"space {str(space)[:80]!r} is invalid: use 1-128 characters of A-Z, a-z, "
                                          "0-9, '_', '.', ':', '-' starting with a letter or digit")
        self.space = space
        self.max_result_bytes = max_result_bytes
        #: False until a host gives a ``WorkflowRuns()`` built without a location its own (:meth:`place`)
        self.placed = False
        self._locate(data_dir, database)
        self.registry = registry
        self.adapter = adapter
        self.keep_runs = keep_runs
        self.keep_seconds = keep_seconds
        self.compact_every = compact_every if compact_every is not None else max(16, (keep_runs or 0) // 4)
        self._workflows: dict[str, Workflow] = {}
        for wf in workflows:
            self.register(wf)
        # the open stream: a FileRecordLog, or a TableRecordLog over a workflows._pg.PgWorkflowLog (database=)
        self._log: FileRecordLog[dict[str, WorkflowRunState]] | TableRecordLog[dict[str, WorkflowRunState]] | None = None
        self._users = 0
        self._held = False
        self._gate: anyio.Lock | None = None
        self._claimed: set[str] = set()
        self._compacting: anyio.Event | None = None
        self._closing = False
        self._resumer: asyncio.Task[Any] | None = None
        self._age_checked = 0.0  # time.monotonic() of the last age-based retention check
        #: what the last compaction did: {"kept", "pruned", "segments"} (None before any)
        self.last_compaction: dict[str, Any] | None = None
        self._pruned_total = 0

    @property
    def _states(self) -> dict[str, WorkflowRunState]:
        """Run id -> state: the open stream's live fold (empty while the journal is not open)."""
        return self._log.state if self._log is not None else {}

    def _locate(self, data_dir: str | os.PathLike[str] | None, database: str | None) -> None:
        self.placed = data_dir is not None or database is not None
        #: ``database``: the runs are rows of ``space`` in PostgreSQL (format: workflows/_pg_schema.py)
        self.database = database
        self.data_dir = Path(data_dir) if data_dir is not None else None
        #: the journal file (None with ``database``)
        self.path: Path | None = journal_path(self.data_dir) if self.data_dir is not None else None
        self.root = self.path.parent if self.path is not None else None
        #: where the runs are, for messages (the database's URL with its password redacted)
        self.where = (f"{redact_dsn(database)} (space {self.space!r})" if database is not None
                      else repr(str(self.data_dir)) if self.data_dir is not None else "(not placed: no data dir or database)")

    def place(self, *, data_dir: str | os.PathLike[str], database: str | None = None) -> bool:
        """For a host: give runs built without a location (``WorkflowRuns()``) the host's own: PostgreSQL
        rows of this ``space`` if ``database`` (``serve --database URL``), else ``<data_dir>/workflows/``.
        Runs built with a location keep it. Returns whether this placed them. ``openfunctions-mcp serve``
        calls it (through the served tool's ``on_server_place``) before it starts them."""
        if self.placed:
            return False
        self._locate(None if database else data_dir, database or None)
        return True

    def _check_placed(self) -> None:
        if not self.placed:
            raise WorkflowDefinitionError(
                "these WorkflowRuns() have no data directory or database yet: a server serving their workflow tool "
                "gives them its own (openfunctions-mcp serve --data-dir/--database); elsewhere pass "
                "WorkflowRuns(data_dir) or WorkflowRuns(database=URL)")

    def register(self, workflow: Workflow) -> Workflow:
        if not isinstance(workflow, Workflow):
            raise WorkflowDefinitionError(f"register() takes a Workflow, got {type(workflow).__name__}")
        if workflow.name is None:
            raise WorkflowDefinitionError("a durable workflow needs a name (pipe(..., name=...) or .named(...)): "
                                          "a run finds its workflow by name when it resumes")
        known = self._workflows.get(workflow.name)
        if known is not None and known is not workflow and known.digest != workflow.digest:
            raise WorkflowDefinitionError(f"another workflow with different steps is already registered as {workflow.name!r}")
        if known is None or known.registry is None or workflow.registry is not None:
            self._workflows[workflow.name] = workflow
        return workflow

    @property
    def workflows(self) -> dict[str, Workflow]:
        return dict(self._workflows)

    # -- holding the journal ------------------------------------------------------

    async def open(self) -> WorkflowRuns:
        """Open the journal (recover, migrate, compact) and keep it open until :meth:`close`."""
        async with self._using():
            self._held = True
        return self

    async def close(self) -> None:
        """Stop a background resume (its run stays unfinished: the next start resumes it) and close
        the journal once no operation uses it."""
        task, self._resumer = self._resumer, None
        if task is not None and not task.done():
            self._closing = True
            task.cancel()
            try:
                await task
            except BaseException:
                pass
            finally:
                self._closing = False
        self._held = False
        await self._release()

    async def start(self) -> None:
        """For a server: open the journal and resume every interrupted run of a registered workflow in
        the background (a blocked run is logged and waits for ``resolve``; it is never re-run).

        Call it once the host's execution journal is attached to the workflows' registries (a server
        started by ``openfunctions-mcp serve`` runs its profile's starters after its own start), so
        the resumed steps' receipts are journaled."""
        await self.open()
        if self._resumer is None:
            self._resumer = asyncio.ensure_future(self._resume_in_background())

    async def _resume_in_background(self) -> None:
        # The host calls start() once its execution journal is attached (openfunctions-mcp serve starts
        # the server, then the profile's starters), so the resumed steps are journaled like any call.
        for item in await self.resume_interrupted():
            if isinstance(item, WorkflowError):
                log.warning("workflow_run_not_resumed", code=item.code, error=item.message, **{
                    k: v for k, v in item.details.items() if k in ("run_id", "steps", "workflow")})
            else:
                log.info("workflow_run_resumed", run_id=item.run_id, workflow=item.workflow, status=item.status)

    async def __aenter__(self) -> WorkflowRuns:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @asynccontextmanager
    async def _using(self) -> AsyncIterator[Any]:
        if self._gate is None:
            self._gate = anyio.Lock()
        async with self._gate:
            if self._users == 0 and getattr(self._log, "failed", False):
                # a database writer whose write failed (its connection lost: the commit may or may not have
                # happened): drop it and read the space again, under its lock again
                log_, self._log = self._log, None
                await _close(log_)
            if self._log is None:
                await self._load()
            self._users += 1
        try:
            while self._compacting is not None:
                await self._compacting.wait()
            assert self._log is not None
            yield self._log
        finally:
            self._users -= 1
            if self._users == 0 and not self._held:
                await self._release()

    async def _release(self) -> None:
        if self._gate is None:
            return
        with anyio.CancelScope(shield=True):
            async with self._gate:
                if self._users == 0 and not self._held and self._log is not None:
                    log_, self._log = self._log, None
                    await _close(log_)

    def _claim(self, run_id: str) -> None:
        if run_id in self._claimed:
            raise RunBusy(f"run {run_id} is being run by another task of this process", details={"run_id": run_id})
        self._claimed.add(run_id)

    async def _load(self) -> None:
        self._check_placed()
        if self.database is not None:
            await self._load_database()
        else:
            await self._load_file()
        self._age_checked = time.monotonic()
        if self._prunable():
            await self._compact()

    async def _load_database(self) -> None:
        from openfunctions.core.postgres import DatabaseError
        from openfunctions.store import StoreError, StoreLocked

        from ._pg import open_pg_workflow_log

        assert self.database is not None
        try:
            log_ = await open_pg_workflow_log(self.database, self.space)
        except StoreLocked as exc:
            raise RunBusy(f"the workflow runs of {self.where} are being run by another process ({exc.message}); "
                          "stop it (a process serving workflows resumes and runs them) or use it",
                          details={"space": self.space}) from None
        except (StoreError, DatabaseError) as exc:
            raise _unavailable(self.space, exc) from None
        try:
            records, log_.records = log_.records, []
            self._log = await anyio.to_thread.run_sync(
                lambda: TableRecordLog(WORKFLOW_RUNS, log_, records, where=self.where))
        except BaseException:
            await _close(log_)
            raise

    async def _load_file(self) -> None:
        path = self.path
        assert path is not None
        try:
            self._log = await FileRecordLog.open(WORKFLOW_RUNS, path, check_header=lambda meta: _check_header(path, meta))
        except JournalLocked as exc:
            raise RunBusy(f"the workflow runs of {self.where} are being run by another process ({exc.message}); "
                          "stop it (a server serving workflows resumes and runs them) or use it",
                          details={"path": str(path), "pid": exc.details.get("pid")}) from None
        except JournalError as exc:
            raise RunCorrupt(f"workflow run journal {str(path)!r} cannot be opened: {exc.message}; it is left untouched",
                             details={"path": str(path), "cause": exc.code}) from None
        await self._migrate_v1()

    async def _migrate_v1(self) -> None:
        """Version 1 kept one file per run: fold each into a snapshot here, then remove the file."""
        assert self.data_dir is not None
        old = runs_dir(self.data_dir)
        if not old.is_dir():
            return
        found: list[tuple[Path, WorkflowRunState]] = []
        for entry in sorted(os.scandir(old), key=lambda e: e.name):
            if not entry.name.endswith(".jsonl") or not entry.is_file(follow_symlinks=False):
                continue
            try:
                st = _read_state(Path(entry.path), None)
            except RunCorrupt as exc:
                log.warning("workflow_v1_run_unreadable", path=entry.path, error=exc.message)
                continue  # left in place, untouched
            found.append((Path(entry.path), st))
        snaps = [("run_snapshot", {"run_id": st.run_id, "state": st.snapshot()}) for _, st in found
                 if st.status != "new" and st.run_id not in self._states]
        assert self._log is not None
        await self._log.append_many(snaps)  # folded by the stream
        for p, _ in found:
            _unlink(p)
            _unlink(Path(f"{p}.lock"))
        fsync_dir(old)
        if found:
            log.info("workflow_v1_runs_migrated", runs=len(snaps), files=len(found))

    # -- retention ----------------------------------------------------------------

    def _prunable(self) -> list[str]:
        """Finished runs past retention: beyond the newest ``keep_runs``, or older than ``keep_seconds``."""
        # a succeeded run still awaiting a verification is kept, as a running one is
        done = sorted((s for s in self._states.values() if s.terminal and not s.awaiting_verification()),
                      key=lambda s: s.updated_at or "")
        out: list[str] = []
        if self.keep_runs is not None and len(done) > self.keep_runs:
            out = [s.run_id for s in done[: len(done) - self.keep_runs]]
        if self.keep_seconds is not None:
            cutoff = time.time() - self.keep_seconds
            taken = set(out)
            out += [s.run_id for s in done if s.run_id not in taken and _epoch(s.updated_at) < cutoff]
        return out

    async def prune(self) -> dict[str, Any]:
        """Compact now: drop the finished runs past retention. Returns ``{"kept", "pruned", "segments"}``
        (``pruned``: every run this call dropped, also by the compaction its open may have run)."""
        before = self._pruned_total
        async with self._using():
            while self._claimed:  # wait for this process's runs to finish: a compaction rewrites the file
                await anyio.sleep(0.01)
            if self._prunable() or self.last_compaction is None:
                await self._compact()
            assert self.last_compaction is not None
            return {**self.last_compaction, "pruned": self._pruned_total - before}

    async def _maybe_compact(self) -> None:
        """After a run: compact once ``compact_every`` finished runs are past retention. Cheap checks first
        (this runs after every run, and :meth:`_prunable` sorts every finished run): by count, that many
        cannot be past ``keep_runs`` before the journal holds ``keep_runs + compact_every`` runs; by age,
        look at most once per :data:`AGE_CHECK_SECONDS`."""
        if self._claimed or self._compacting is not None or self._log is None:
            return
        every = max(1, self.compact_every)
        by_count = self.keep_runs is not None and len(self._states) >= self.keep_runs + every
        now = time.monotonic()
        by_age = self.keep_seconds is not None and now - self._age_checked >= AGE_CHECK_SECONDS
        if not (by_count or by_age):
            return
        if by_age:
            self._age_checked = now
        if len(self._prunable()) >= every:
            await self._compact()

    async def _compact(self) -> dict[str, Any]:
        """Rotate the journal into a segment, write a snapshot of every kept run and a ``compacted``
        record (one fsync), delete the segments. Runs in no run's way: callers wait on ``_compacting``."""
        assert self._log is not None and not self._claimed
        self._compacting = anyio.Event()
        try:
            with anyio.CancelScope(shield=True):
                pruned = set(self._prunable())
                kept = [s for s in self._states.values() if s.status != "new" and s.run_id not in pruned]
                # one mechanism (core.records): the file rotated, these snapshots and a compacted record in one
                # fsync, the segments deleted; rows: the same records replace the space's rows in one transaction
                done = await self._log.compact([("run_snapshot", {"run_id": s.run_id, "state": s.snapshot()})
                                                for s in kept], kept=len(kept), pruned=len(pruned))
                segments = done.segments
                self.last_compaction = {"kept": len(kept), "pruned": len(pruned), "segments": len(segments)}
                self._pruned_total += len(pruned)
                log.info("workflow_runs_compacted", **self.last_compaction)
        finally:
            ev, self._compacting = self._compacting, None
            ev.set()
        assert self.last_compaction is not None
        return self.last_compaction

    # -- running ----------------------------------------------------------------

    async def run(self, workflow: Workflow, input: Any = None, *, run_id: str | None = None,
                  context: ToolExecutionContext | None = None, registry: Any = None, adapter: Any = None) -> RunOutcome:
        """Run ``workflow`` durably and return how it ended.

        ``run_id`` (default: a new ``wfr_…`` id) is an idempotency key: if that run exists, its
        recorded outcome is returned (finished) or it is resumed (interrupted) — with the same
        workflow, never a second run. Raises :class:`RunBlocked` for a run with an uncertain step,
        :class:`RunBusy` if another task or process runs it, :class:`InvalidInput` for non-JSON input.
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
        async with self._using() as log_:
            self._claim(run_id)
            try:
                state = self._states.get(run_id)
                if state is None or state.status == "new":  # a new run, or one that crashed before its first record
                    state = self._states[run_id] = WorkflowRunState(run_id=run_id)
                    journal = RunJournal(log_, state, max_result_bytes=self.max_result_bytes)
                    journal.started({"run_id": run_id, "workflow": workflow.name, "digest": workflow.digest,
                                     "input": input_copy})
                    return await self._drive(journal, workflow, input_copy, context, registry, adapter, resumed=False)
                if state.workflow != workflow.name:
                    raise WorkflowChanged(
                        f"run {run_id} belongs to workflow {state.workflow!r}, not {workflow.name!r}",
                        details={"run_id": run_id, "workflow": state.workflow},
                    )
                journal = RunJournal(log_, state, max_result_bytes=self.max_result_bytes)
                return await self._drive(journal, workflow, state.input, context, registry, adapter, resumed=True)
            finally:
                self._claimed.discard(run_id)
                await self._maybe_compact()

    async def resume(self, run_id: str, *, context: ToolExecutionContext | None = None, registry: Any = None,
                     adapter: Any = None) -> RunOutcome:
        """Resume an interrupted run after its last settled step (a finished run: its outcome).

        Raises :class:`WorkflowRunNotFound`, :class:`RunBusy`, :class:`RunCorrupt`, :class:`RunBlocked`,
        :class:`WorkflowUnknown` (not registered here), :class:`WorkflowChanged` (its steps changed).
        """
        run_id = check_run_id(run_id)
        async with self._using() as log_:
            self._claim(run_id)
            try:
                state = self._states.get(run_id)
                if state is None or state.status == "new":
                    raise WorkflowRunNotFound(f"no workflow run {run_id!r} in {self.where} "
                                      "(see `openfunctions-mcp workflows list`)", details={"run_id": run_id})
                journal = RunJournal(log_, state, max_result_bytes=self.max_result_bytes)
                wf = self._workflows.get(state.workflow)
                if wf is None and not state.terminal:
                    raise WorkflowUnknown(
                        f"run {run_id} is a run of workflow {state.workflow!r}, which is not registered here "
                        f"(known: {', '.join(sorted(self._workflows)) or 'none'})",
                        details={"run_id": run_id, "workflow": state.workflow},
                    )
                return await self._drive(journal, wf, state.input, context, registry, adapter, resumed=True)
            finally:
                self._claimed.discard(run_id)
                await self._maybe_compact()

    async def resume_interrupted(self) -> list[RunOutcome | WorkflowError]:
        """On start: resume every unfinished run of a registered workflow, one after another.

        Returns each run's outcome, or the error that stopped it (blocked, busy, corrupt, changed):
        a blocked run waits for :meth:`resolve`; it is reported, not retried.
        """
        out: list[RunOutcome | WorkflowError] = []
        async with self._using():
            todo = [s.run_id for s in self._states.values() if s.status in ("running", "blocked")
                    and s.workflow in self._workflows and s.run_id not in self._claimed]
            for run_id in todo:
                try:
                    out.append(await self.resume(run_id))
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
            # A tool its author declared idempotent may run again: its uncertain step is re-run (and
            # its records say so) instead of waiting for a person. Any other uncertain step blocks.
            reg = registry if registry is not None else self.registry if wf.registry is None else None
            reg = reg if reg is not None else wf.registry
            again = [p for p in uncertain if _idempotent(reg, state.steps[p].tool)]
            if again:
                await journal.rerun(again)
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
                if self._closing:  # shutting down: leave the run unfinished, the next start resumes it
                    await journal.flush()
                else:
                    await journal.finished("cancelled", error={"code": "cancelled", "message": "the run was cancelled"})
            raise
        except OpenFunctionsError as exc:
            from openfunctions.store import StoreError

            if isinstance(exc, (JournalError, StoreError)):
                raise  # the run cannot be recorded: leave it unfinished (resumable, or blocked)
            if isinstance(exc, (WorkflowDefinitionError, NonDeterministic, StepInterrupted)):
                # Not the run's failure but the code's or the host's (a step refused while it shuts
                # down): record what settled, leave the run unfinished (it resumes once the code or
                # configuration is fixed, or at the host's next start).
                with anyio.CancelScope(shield=True):
                    await journal.flush()
                raise
            await journal.finished("failed", error=exc.to_dict())
            return _outcome(state, resumed=resumed)
        await journal.finished("succeeded", result=result)
        return _outcome(state, resumed=resumed)

    # -- operator ---------------------------------------------------------------

    async def resolve(self, run_id: str, step: str, *, applied: bool, result: Any = None, by: str | None = None) -> WorkflowRunState:
        """Answer for an uncertain step after checking its effect by other means.

        ``applied=True``: the effect happened; ``result`` (JSON) becomes the step's result and the
        run continues after it. ``applied=False``: it did not happen; the step runs again on resume.
        Raises :class:`NotUncertain` if ``step`` is not an uncertain step of that run.
        """
        run_id = check_run_id(run_id)
        async with self._using() as log_:
            state = self._states.get(run_id)
            if state is None or state.status == "new":
                raise WorkflowRunNotFound(f"no workflow run {run_id!r} in {self.where} "
                                  "(see `openfunctions-mcp workflows list`)", details={"run_id": run_id})
            self._claim(run_id)
            try:
                rec = state.steps.get(step)
                if state.terminal or rec is None or not rec.is_uncertain:
                    raise NotUncertain(
                        f"step {step!r} of run {run_id} is not uncertain (uncertain steps: {state.uncertain_steps() or 'none'})",
                        details={"run_id": run_id, "step": step, "uncertain": state.uncertain_steps()},
                    )
                value = json_copy(result, step, rec.name, self.max_result_bytes) if applied else None
                journal = RunJournal(log_, state, max_result_bytes=self.max_result_bytes)
                if state.status != "blocked":
                    await journal.blocked(state.uncertain_steps(), "resolution requested")
                await journal.resolved(step, applied=applied, result=value, by=by)
                return state
            finally:
                self._claimed.discard(run_id)

    async def verify(self, run_id: str, step: str, *, receipt: Any, by: str | None = None) -> WorkflowRunState:
        """Link a verifier call's receipt (a :class:`~openfunctions.core.Receipt` or its dict) to ``step``.

        ``step`` must have succeeded with a tool that declares
        ``capability.requires_verification``; the receipt must be a call that
        succeeded and not the step's own. Until each such step is verified a
        succeeded run is not :attr:`WorkflowRunState.completed`. Allowed after the run
        finished; the first verification of a step counts.
        """
        run_id = check_run_id(run_id)
        d = receipt.to_dict() if hasattr(receipt, "to_dict") else receipt
        if not isinstance(d, dict) or not isinstance(d.get("receipt_id"), str):
            raise VerificationRefused("the evidence must be a receipt (with a receipt_id)", details={"run_id": run_id})
        async with self._using() as log_:
            state = self._states.get(run_id)
            if state is None or state.status == "new":
                raise WorkflowRunNotFound(f"no workflow run {run_id!r} in {self.where} "
                                  "(see `openfunctions-mcp workflows list`)", details={"run_id": run_id})
            rec = state.steps.get(step)
            if rec is None or rec.status != "succeeded" or not rec.requires_verification:
                raise VerificationRefused(
                    f"step {step!r} of run {run_id} is not a succeeded step that requires verification "
                    f"(awaiting: {state.awaiting_verification() or 'none'})",
                    details={"run_id": run_id, "step": step, "awaiting": state.awaiting_verification()})
            if d.get("outcome") != "succeeded" or d["receipt_id"] == rec.receipt_id:
                raise VerificationRefused(
                    f"receipt {d['receipt_id']} cannot verify step {step!r}: "
                    + ("it is the step's own call" if d["receipt_id"] == rec.receipt_id else f"it ended {d.get('outcome')!r}"),
                    details={"run_id": run_id, "step": step, "receipt_id": d["receipt_id"]})
            if rec.verification is not None:
                return state
            self._claim(run_id)
            try:
                await RunJournal(log_, state, max_result_bytes=self.max_result_bytes).verified(
                    step, receipt_id=d["receipt_id"], tool=d.get("tool"), by=by)
                return state
            finally:
                self._claimed.discard(run_id)

    # -- reading (no lock: works while another process runs runs) -------------------

    def show(self, run_id: str) -> WorkflowRunState:
        """The run's state as the journal says now (lock-free). Raises WorkflowRunNotFound, RunCorrupt."""
        run_id = check_run_id(run_id)  # before anything is read
        state = self._read().get(run_id)
        if state is None or state.status == "new":
            raise WorkflowRunNotFound(f"no workflow run {run_id!r} in {self.where} (see `openfunctions-mcp workflows list`)",
                              details={"run_id": run_id})
        return state

    def list(self) -> list[dict[str, Any]]:
        """A summary per run, oldest first. Raises RunCorrupt if the journal is damaged."""
        states = [s for s in self._read().values() if s.status != "new"]
        return [s.summary() for s in sorted(states, key=lambda s: s.started_at or "")]

    def _read(self) -> dict[str, WorkflowRunState]:
        if self._log is not None:
            return dict(self._states)
        self._check_placed()
        if self.database is not None:
            from openfunctions.core.postgres import DatabaseError
            from openfunctions.store import StoreError

            from ._pg import read_pg_workflow_records

            try:
                records = read_pg_workflow_records(self.database, self.space)
            except (StoreError, DatabaseError) as exc:
                raise _unavailable(self.space, exc) from None
            return _fold_records(self.where, records)
        assert self.path is not None
        if not os.path.lexists(self.path):
            return {}
        path = self.path
        try:
            return replay(WORKFLOW_RUNS, path, check_header=lambda meta: _check_header(path, meta)).state
        except JournalCorrupt as exc:
            raise RunCorrupt(f"workflow run journal {str(self.path)!r} is corrupt: {exc.message}",
                             details={"path": str(self.path), "cause": exc.code}) from None
        except (JournalError, OSError) as exc:
            msg = exc.message if isinstance(exc, JournalError) else (exc.strerror or str(exc))
            raise RunCorrupt(f"workflow run journal {str(self.path)!r} cannot be read: {msg}",
                             details={"path": str(self.path)}) from None


def _fold_records(where: str, records: Iterable[Any]) -> dict[str, WorkflowRunState]:
    """The database's rows of a space, folded (compaction replaced its rows: no segments to look at)."""
    return WORKFLOW_RUNS.fold(records, where=where)


def _unavailable(space: str, exc: OpenFunctionsError) -> RunStoreUnavailable:
    """The store's error (it names the database, password redacted), as the workflows' own."""
    tag = f"space {space!r}"
    return RunStoreUnavailable(exc.message if tag in exc.message else f"{exc.message} (workflow runs, {tag})",
                               details={"cause": exc.code, "space": space})


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _epoch(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _check_header(path: Path, meta: Any) -> None:
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise RunCorrupt(f"{str(path)!r} is not a workflow run journal (header meta {meta!r})", details={"path": str(path)})
    if meta.get("version") != VERSION:
        raise RunCorrupt(f"{str(path)!r} has workflow-runs format version {meta.get('version')!r}; this build reads {VERSION}",
                         details={"path": str(path)})


def _check_v1_header(path: Path, meta: Any, run_id: str | None) -> None:
    if not isinstance(meta, dict) or meta.get("format") != V1_FORMAT or meta.get("version") != V1_VERSION:
        raise RunCorrupt(f"{str(path)!r} is not a version 1 workflow run journal (header meta {meta!r})",
                         details={"path": str(path)})
    if run_id is not None and meta.get("run_id") != run_id:
        raise RunCorrupt(f"{str(path)!r} belongs to run {meta.get('run_id')!r}, not {run_id!r}", details={"path": str(path)})


def _read_state(path: Path, run_id: str | None) -> WorkflowRunState:
    """A version 1 run file, folded (for the migration)."""
    try:
        records = read_records(path)
        header_meta = _header_meta(path)
        _check_v1_header(path, header_meta, run_id)
        state = WorkflowRunState(run_id=header_meta["run_id"], workflow=header_meta.get("workflow") or "")
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


def _idempotent(registry: Any, tool: str | None) -> bool:
    """Whether ``tool`` (as the run's registry has it now) declares ``capability.idempotent``."""
    if registry is None or tool is None:
        return False
    try:
        cap = registry.get(tool).capability
    except OpenFunctionsError:  # no such tool any more: nothing says a re-run is harmless
        return False
    return bool(cap is not None and cap.idempotent)


def _tool_note(tool: str | None) -> str:
    return f", tool {tool}" if tool else ""


def _blocked_error(state: WorkflowRunState) -> RunBlocked:
    steps = state.uncertain_steps()
    shown = ", ".join(f"{p} ({state.steps[p].name}{_tool_note(state.steps[p].tool)})" for p in steps)
    return RunBlocked(
        f"run {state.run_id} is blocked: step(s) {shown} started and never settled, so their effect is uncertain; "
        f"check the effect, then `openfunctions-mcp workflows resolve {state.run_id} STEP --applied --result JSON` "
        f"or `--not-applied`, and resume",
        details={"run_id": state.run_id, "steps": steps},
    )


def _outcome(state: WorkflowRunState, *, resumed: bool) -> RunOutcome:
    return RunOutcome(run_id=state.run_id, workflow=state.workflow, status=state.status, result=state.result,
                      error=state.error, resumed=resumed, awaiting_verification=state.awaiting_verification())


async def _close(log: Any) -> None:
    with anyio.CancelScope(shield=True):
        await log.close()


__all__ = ["KEEP_RUNS", "KEEP_SECONDS", "RunOutcome", "WorkflowRuns", "check_run_id", "journal_path", "run_path", "runs_dir"]
