"""Where run records live, and the two logs that hold them.

Layout: ``<data-dir>/journal/runs.journal`` next to the execution journals
(``<profile>.journal``), same durable log (kind ``"runs"``; the record format
is in :mod:`._records`). A second server on the same data directory takes
the next free slot, ``runs.2.journal`` … (as the execution journal does); a
slot left by a dead process is recovered by the next server that opens it.

Every log and reader folds through the one stream :data:`._records.AGENT_RUNS`
(``core.records``), in its summary view (``run_messages`` left out; one run's
conversation is :func:`read_history`'s). A record of a type this version does not
know is kept unfolded (``unknown``) and logged once per type; nothing rewrites a
run journal, so it stays where it was written.

- :class:`RunJournal`: the durable log. ``open`` takes the kernel lock,
  folds every record of the live file with :data:`._records.AGENT_RUNS` in the recovery scan, then
  closes every unfinished run as ``interrupted`` (one group, one fsync).
  Past ``rotate_over`` bytes (64 MiB) it then continues in a new segment
  (``runs.journal.seg-000001`` …, as the execution journal does), so an open
  reads a bounded file however long the history. In memory it keeps the
  runs in progress and the last :data:`KEEP_FINISHED` finished ones; older
  runs are read from the files (:func:`read_runs`).
- :class:`MemoryRunLog`: the same fold without a file (library use, tests).
- :class:`DatabaseRunLog` (``serve --database``): the same records as rows
  in PostgreSQL, shared by replicas; a dead replica's runs are finished
  ``interrupted`` by the others' sweep.
- :func:`read_runs`: a lock-free fold over every slot and segment, for the
  CLI and for reading runs another process wrote; :func:`read_history`
  rebuilds one run's conversation from its ``run_messages`` records the same way; :func:`read_runs_in_database`
  and :func:`tail_runs_in_database` read the rows the same way (no lock, no write).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from openfunctions.adapters import Message, valid_json
from openfunctions.core import run_every, stop_task
from openfunctions.core.errors import JournalLocked, NonJsonValue
from openfunctions.core.journal import JournalLog, Record, read_records, segment_paths
from openfunctions.core.records import Entry, TableRecordLog

from . import _records as R
from ._errors import RunEnded, RunJournalError

MAX_SLOTS = 16
#: Finished runs a live journal keeps folded in memory (older ones: read_runs).
KEEP_FINISHED = 1000
ROTATE_BYTES = 64 * 2**20


def runs_journal_path(data_dir: str | os.PathLike[str], slot: int = 1) -> Path:
    name = "runs.journal" if slot == 1 else f"runs.{slot}.journal"
    return Path(data_dir) / "journal" / name


class MemoryRunLog:
    """Run records folded in memory only: nothing survives the process."""

    path: Path | None = None

    def __init__(self) -> None:
        self.state: dict[str, R.RunState] = {}
        #: records of types this version does not know, kept unfolded (``AGENT_RUNS``: ``KEEP``)
        self.unknown: list[tuple[str, dict[str, Any]]] = []

    def _fold(self, rtype: str, data: dict[str, Any]) -> None:
        """The summary view's fold of one record (the same apply live and at replay)."""
        if not R.RUN_SUMMARIES.apply(self.state, Entry(rtype, data)):
            self._kept(rtype, data)

    def _kept(self, rtype: str, data: dict[str, Any]) -> None:
        """A record of a type this version does not know: kept unfolded, logged once per type."""
        if not any(t == rtype for t, _ in self.unknown):
            _log().warning("records_of_unknown_type_kept", stream=R.AGENT_RUNS.name, type=rtype,
                           path=str(self.path), hint="written by a newer version; kept, not folded")
        self.unknown.append((rtype, data))

    async def append(self, rtype: str, data: dict[str, Any], *, wait: bool = True) -> None:
        self._fold(rtype, data)

    def _trim(self, keep: str | None = None) -> None:
        finished = [rid for rid, r in self.state.items() if r.finished is not None and rid != keep]
        for rid in finished[: max(0, len(finished) - KEEP_FINISHED)]:  # dicts keep insertion (start) order
            del self.state[rid]

    def get(self, run_id: str) -> R.RunState | None:
        return self.state.get(run_id)

    async def close(self) -> None:
        pass


class RunJournal(MemoryRunLog):
    """The durable run log.

    ``append(..., wait=True)`` returns once the record is on disk (write +
    fsync). ``wait=False`` (the loop's ``run_round`` records) queues it and
    returns: records reach the file in the order they were appended, so the
    next waited append (the run's ``run_finished``) returns only once every
    earlier record is durable too, and a round's fsync overlaps the next
    model call instead of adding to it. A crash may lose the rounds written
    since the last waited append; the run is then ``interrupted`` with fewer
    rounds, and its calls' receipts are still in the execution journal,
    linked by ``parent_receipt_id``. One writer task drains the queue, a
    batch per fsync.
    """

    def __init__(self, log: JournalLog, state: dict[str, R.RunState]) -> None:
        super().__init__()
        self.log = log
        self.state = state
        self.path = log.path
        #: Runs this open found unfinished and closed as ``interrupted``.
        self.interrupted: list[str] = []
        self._queue: list[tuple[str, dict[str, Any], asyncio.Future[None] | None]] = []
        self._wake = asyncio.Event()
        self._failed: BaseException | None = None
        self._writer: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self.rotated_to: Path | None = None  # the segment an open past the size limit rotated into

    @classmethod
    async def open(cls, path: str | os.PathLike[str], *, rotate_over: int | None = ROTATE_BYTES) -> RunJournal:
        seen: list[tuple[str, dict[str, Any]]] = []
        log = await JournalLog.open(path, kind=R.KIND, on_record=lambda rec: seen.append((rec.type, rec.data)))
        self = cls(log, {})
        try:
            for rtype, data in seen:
                self._fold(rtype, data)
            seen.clear()
            await self._recover()
            if rotate_over is not None and log.size > rotate_over:
                self.rotated_to = await log.rotate()  # every run is finished now: the segment is complete history
            self._trim()
        except BaseException:
            await log.close()
            raise
        self._writer = asyncio.get_running_loop().create_task(self._write_queued())
        return self

    @classmethod
    async def open_in(cls, data_dir: str | os.PathLike[str]) -> RunJournal:
        """Open the first free slot under ``data_dir`` (see the module docstring)."""
        for slot in range(1, MAX_SLOTS + 1):
            try:
                return await cls.open(runs_journal_path(data_dir, slot))
            except JournalLocked:
                continue
        raise RunJournalError(f"all {MAX_SLOTS} run journal slots in {Path(data_dir) / 'journal'} are held by running servers")

    async def _recover(self) -> None:
        pending = R.unfinished(self.state)
        records = [interrupted_record(r) for r in pending]
        if records:
            await self.log.append_many(records)
            for rtype, data in records:
                self._fold(rtype, data)
        self.interrupted = [r.run_id for r in pending]

    async def append(self, rtype: str, data: dict[str, Any], *, wait: bool = True) -> None:
        if self._failed is not None:
            raise RunJournalError(f"the run journal {self.path} failed earlier and refuses records until reopened: "
                                  f"{self._failed}") from self._failed
        if self._writer is None:
            raise RunJournalError(f"the run journal {self.path} is closed")
        fut = asyncio.get_running_loop().create_future() if wait else None
        self._queue.append((rtype, data, fut))
        self._idle.clear()
        self._wake.set()
        # Folded at once (in-process readers see a record being written); a
        # failed write fails the journal, so state and file never diverge quietly.
        self._fold(rtype, data)
        if rtype == R.FINISHED and len(self.state) > 2 * KEEP_FINISHED:
            self._trim(keep=data["run_id"])  # its claim follows
        if fut is not None:
            await fut

    async def _write_queued(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._queue = self._queue, []
            if not batch:
                continue
            try:
                try:
                    await self.log.append_many([(t, d) for t, d, _ in batch])
                except NonJsonValue:
                    # Text entering a run is made valid where it enters (adapters.valid_text); this is the
                    # last line. append_many encodes everything before it writes anything, so nothing was
                    # written: replace the offending text in place (the folded state holds the same dicts)
                    # and write the batch again, instead of stopping the journal over one record's data.
                    for _, d, _ in batch:
                        clean = valid_json(d)
                        if clean is not d:
                            d.clear()
                            d.update(clean)
                    await self.log.append_many([(t, d) for t, d, _ in batch])
            except Exception as exc:  # fail-stop, as the log itself does
                self._failed = exc
                for _, _, fut in batch + self._queue:
                    if fut is not None and not fut.done():
                        fut.set_exception(exc)
                self._queue = []
                self._idle.set()
                continue
            for _, _, fut in batch:
                if fut is not None and not fut.done():
                    fut.set_result(None)
            if not self._queue:
                self._idle.set()

    async def close(self) -> None:
        if self._writer is not None:
            if self._failed is None:
                await self._idle.wait()  # queued records reach the file first
            self._writer.cancel()
            try:
                await self._writer
            except asyncio.CancelledError:
                pass
            self._writer = None
        await self.log.close()


class DatabaseRunLog(MemoryRunLog):
    """Run records in PostgreSQL (``agents/_pg_runs.py``'s ``PgRunLog``, schema at its top), shared by replicas.

    The same shape as :class:`RunJournal`: the stream's live fold. Each run this
    process writes is a ``core.records.TableRecordLog`` over its rows (opened
    empty with the run's start, or by reading the rows of a run it did not
    start), folding through :data:`._records.RUN_SUMMARIES` into the one
    :attr:`state` every run's log shares: the fold :meth:`load` replays from the
    rows. Every append is one committed, guarded statement before it returns
    (rounds included: there is no unwaited queue here).

    A record for a run that already ended is refused, :class:`RunEnded`
    (``run_ended``), and nothing is written: only a replica that lost its
    database lock while it lived can meet this (a survivor's sweep finished its
    run ``interrupted``). A round is refused like the finish: the recovery's
    record says the run ended, with the rounds it counted; a file run journal
    cannot hold a record after a recovery either (its kernel lock). The calls
    of a refused round stay in the execution journal, linked by their
    ``parent_receipt_id``; the run stops at the refusal instead of calling
    more tools. A run's claim, its verifications and its fulfilment are
    written after its end, as they are in a file.

    :meth:`open` and a sweep every ``sweep_interval`` seconds finish
    ``interrupted`` the runs of processes that died (their advisory lock
    free), through the same table log (their rows replayed, the end
    appended); nothing is resumed.
    """

    def __init__(self, log: Any) -> None:
        super().__init__()
        self.log = log
        self.path = None
        #: Runs of dead processes this log finished ``interrupted``.
        self.interrupted: list[str] = []
        self._sweeper: asyncio.Task[None] | None = None
        self._live: dict[str, TableRecordLog[dict[str, R.RunState]]] = {}  # the runs in :attr:`state`

    @classmethod
    async def open(cls, url: str, space: str = "default", *, sweep_interval: float | None = 5.0) -> DatabaseRunLog:
        from ._pg_runs import open_pg_run_log

        self = cls(await open_pg_run_log(url, space))
        try:
            await self.sweep()
        except BaseException:
            await self.log.close()
            raise
        if sweep_interval:
            self._sweeper = run_every(sweep_interval, self.sweep, name="run-sweep", on_error=_sweep_failed)
        return self

    async def sweep(self) -> list[str]:
        async def finish(run_id: str) -> bool:
            dead = await self._replay(run_id)
            try:
                await dead.append(*interrupted_record(dead.state.get(run_id) or R.RunState(run_id, {"run_id": run_id})))
            except self.log.refused:
                if dead.failed:
                    raise
                return False  # another survivor finished it first
            finally:
                await dead.close()
            return True

        found = await self.log.recover_dead(finish)
        self.interrupted.extend(found)
        return list(found)

    async def _replay(self, run_id: str, state: dict[str, R.RunState] | None = None) -> TableRecordLog[dict[str, R.RunState]]:
        """A run's live log over its rows as they are now (folded into ``state``, or a state of its own)."""
        table = await self.log.table(run_id)
        live = TableRecordLog(R.RUN_SUMMARIES, table, table.records, where=table.where, state=state)
        table.records = []  # folded (a summary leaves the conversation out: none of it is kept)
        return live

    async def _log_of(self, run_id: str) -> TableRecordLog[dict[str, R.RunState]]:
        live = self._live.get(run_id)
        if live is None:  # a run this process did not start, or whose log it dropped: its rows, folded again
            self.state.pop(run_id, None)
            live = self._live[run_id] = await self._replay(run_id, self.state)
        return live

    async def append(self, rtype: str, data: dict[str, Any], *, wait: bool = True) -> None:
        run_id = data["run_id"]
        if rtype == R.STARTED:
            table = await self.log.table(run_id, create=await self.log.new_run(run_id, data.get("agent")))
            self.state.pop(run_id, None)
            live = self._live[run_id] = TableRecordLog(R.RUN_SUMMARIES, table, [], where=table.where, state=self.state)
        else:
            live = await self._log_of(run_id)
        try:
            written = await live.append(rtype, data)
        except Exception as exc:
            if live.failed:  # its outcome is unknown: the next record reads the rows again
                self._live.pop(run_id, None)
            elif isinstance(exc, self.log.refused):
                await self._refused(run_id, rtype)
            raise
        if rtype not in R.RUN_SUMMARIES.types:
            self._kept(written.type, written.data)
        if rtype == R.FINISHED and len(self.state) > 2 * KEEP_FINISHED:
            self._trim(keep=run_id)

    async def _refused(self, run_id: str, rtype: str) -> NoReturn:
        """The guard refused ``rtype``'s record: raise why, the run's state folded again from its rows."""
        self._live.pop(run_id, None)
        try:
            await self._log_of(run_id)
        except Exception as exc:  # noqa: BLE001 - the refusal below is the news; the next record reads again
            _log().info("run_reread_failed", run_id=run_id, error=f"{type(exc).__name__}: {exc}"[:200])
            self._live.pop(run_id, None)
        if rtype == R.STARTED:
            raise RunJournalError(f"run {run_id} already exists in the database; this start is not recorded",
                                  details={"run_id": run_id})
        if rtype in self.log.after_end:
            raise RunJournalError(f"no run {run_id} in the database space {self.log.space!r}; this {rtype} record "
                                  "is not recorded", details={"run_id": run_id, "type": rtype})
        what = "end" if rtype == R.FINISHED else f"{rtype} record"
        raise RunEnded(f"run {run_id} was already finished in the database (another server recovered it as "
                       f"interrupted after this one lost its database lock); this {what} is not recorded",
                       details={"run_id": run_id, "type": rtype})

    def _trim(self, keep: str | None = None) -> None:
        super()._trim(keep)
        for run_id in [k for k in self._live if k not in self.state]:
            del self._live[run_id]  # a table holds no connection: nothing to release

    async def load(self, run_id: str) -> R.RunState | None:
        """The run as its rows say (any replica's): the replay of what :attr:`state` folds live."""
        return _summary(await self.log.records(run_id)).get(run_id)

    async def load_history(self, run_id: str) -> list[Message]:
        """The run's conversation as its rows say (any replica's; see :func:`._records.history`)."""
        return R.history(await self.log.records(run_id), run_id)

    async def close(self) -> None:
        await stop_task(self._sweeper)
        self._sweeper = None
        self._live.clear()
        await self.log.close()


def _log() -> Any:
    import structlog

    return structlog.get_logger("openfunctions.agents")


def _sweep_failed(exc: Exception) -> None:
    # retried at the next round; the database may be away
    import structlog

    structlog.get_logger("openfunctions.agents").warning("run_sweep_failed", error=str(exc)[:300])


def interrupted_record(r: R.RunState) -> tuple[str, dict[str, Any]]:
    """The ``run_finished`` (``interrupted``, ``recovered``) recovery writes for a run its process left unfinished."""
    return (R.FINISHED, R.finished(run_id=r.run_id, status="interrupted", rounds=len(r.rounds),
                                   usage=_usage(r.rounds), receipts=_receipts(r.rounds), text=None,
                                   error={"code": "run_interrupted", "message": "the process ended while this run "
                                          "was in progress; it was not resumed and none of its tool calls were re-run"},
                                   recovered=True))


def _usage(rounds: list[dict[str, Any]]) -> dict[str, int]:
    return {k: sum(int((r.get("usage") or {}).get(k, 0)) for r in rounds) for k in ("input_tokens", "output_tokens")}


def _receipts(rounds: list[dict[str, Any]]) -> list[str]:
    return [c["receipt_id"] for r in rounds for c in r.get("tool_calls", []) if c.get("receipt_id")]


def journal_files(data_dir: str | os.PathLike[str]) -> list[Path]:
    """Every run journal file under ``data_dir``: each slot's segments (oldest first), then the slot."""
    out: list[Path] = []
    for slot in range(1, MAX_SLOTS + 1):
        p = runs_journal_path(data_dir, slot)
        out += segment_paths(p)
        if p.exists():
            out.append(p)
    return out


async def read_runs_in_database(url: str, run_id: str | None = None, *, space: str = "default",
                                limit_runs: int = 1000, connect_timeout: float = 10.0) -> dict[str, R.RunState]:
    """Fold the runs in the database (one run, or the newest ``limit_runs``), writing nothing and taking no lock."""
    from ._pg_runs import open_pg_run_log

    log = await open_pg_run_log(url, space, register=False, max_connections=1, timeout=connect_timeout)
    try:
        records = await log.records(run_id) if run_id is not None else await log.all_records(limit_runs)
    finally:
        await log.close()
    return _summary(records)


#: ``runs tail -f --database``: how often the follower polls, and how far below the newest seq it has seen it
#: reads again (a replica's record may commit after a higher seq became visible; it is printed then, once).
TAIL_POLL_S = 0.5
TAIL_LOOKBACK = 1000


@dataclass(frozen=True)
class TailRecord:
    """A run record as ``runs tail`` prints it (a journal file's line, or a database row)."""

    type: str
    time: str | None
    data: dict[str, Any]


async def tail_runs_in_database(url: str, emit: Callable[[TailRecord], None], *, last: int = 10, follow: bool = False,
                                space: str = "default", poll: float = TAIL_POLL_S,
                                stop: Callable[[], bool] = lambda: False,
                                ready: Callable[[], None] = lambda: None, connect_timeout: float = 10.0) -> None:
    """``emit`` the newest ``last`` run records in the database, then (``follow``) each new one, in seq order.

    Polls every ``poll`` seconds (one indexed read); writes nothing, takes no
    lock. Every record committed after ``ready()`` is called (once the newest
    records are read) is emitted once, also one that commits out of seq order
    (read again within :data:`TAIL_LOOKBACK` seqs of the newest seen). Stops
    when ``stop()`` is true after a poll (the CLI stops on Ctrl-C instead).
    """
    from ._pg_runs import open_pg_run_log

    log = await open_pg_run_log(url, space, register=False, max_connections=1, timeout=connect_timeout)
    try:
        # following: what is there now (within the lookback) counts as seen, the newest ``last`` printed
        rows = await log.tail(last=max(last, TAIL_LOOKBACK) if follow else last) if follow or last > 0 else []
        for _seq, rtype, at, data in rows[-last:] if last > 0 else []:
            emit(TailRecord(rtype, at, data))
        if not follow:
            return
        newest = rows[-1][0] if rows else 0
        seen: set[int] = {r[0] for r in rows}
        ready()
        while not stop():
            await asyncio.sleep(poll)
            floor = max(newest - TAIL_LOOKBACK, 0)
            for seq, rtype, at, data in await log.tail(after=floor):
                if seq not in seen:
                    seen.add(seq)
                    newest = max(newest, seq)
                    emit(TailRecord(rtype, at, data))
            seen = {q for q in seen if q > newest - TAIL_LOOKBACK}
    finally:
        await log.close()


def _summary(records: Iterable[tuple[str, dict[str, Any]]]) -> dict[str, R.RunState]:
    """The summary view's fold (``run_messages`` left out; see :mod:`._records`)."""
    return R.RUN_SUMMARIES.fold(Entry(t, d) for t, d in records)


def _fold_files(data_dir: str | os.PathLike[str], keep: Callable[[Record], bool]) -> dict[str, R.RunState]:
    state: dict[str, R.RunState] = {}
    for p in journal_files(data_dir):
        R.AGENT_RUNS.fold((rec for rec in read_records(p) if keep(rec)), state, where=p)
    return state


def read_runs(data_dir: str | os.PathLike[str]) -> dict[str, R.RunState]:
    """Fold every run record under ``data_dir`` through ``AGENT_RUNS`` (summary view) without taking a lock (a
    live writer's tail may be missing). Each slot's segments, oldest first, then the slot: a run journal is
    rotated, never compacted, so every source is history."""
    return _fold_files(data_dir, lambda rec: R.in_summary(rec.type))


def read_history(data_dir: str | os.PathLike[str], run_id: str) -> list[Message]:
    """Run ``run_id``'s conversation under ``data_dir`` (no lock taken): its records folded through
    ``AGENT_RUNS`` (see :meth:`._records.RunState.history`): what to send a model to continue it, after a
    restart too."""
    run = _fold_files(data_dir, lambda rec: rec.data.get("run_id") == run_id).get(run_id)
    return run.history() if run is not None else []


__all__ = ["DatabaseRunLog", "KEEP_FINISHED", "MemoryRunLog", "RunJournal", "TailRecord", "interrupted_record", "journal_files",
           "read_history", "read_runs", "read_runs_in_database", "runs_journal_path", "tail_runs_in_database"]
