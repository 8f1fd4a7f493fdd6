"""Where run records live, and the two logs that hold them.

Layout: ``<data-dir>/journal/runs.journal`` next to the execution journals
(``<profile>.journal``), same durable log (kind ``"runs"``; the record format
is in :mod:`._records`). A second server on the same data directory takes
the next free slot, ``runs.2.journal`` … (as the execution journal does); a
slot left by a dead process is recovered by the next server that opens it.

- :class:`RunJournal`: the durable log. ``open`` takes the kernel lock,
  folds every record with :func:`._records.apply` in the recovery scan, then
  closes every unfinished run as ``interrupted`` (one group, one fsync).
- :class:`MemoryRunLog`: the same fold without a file (library use, tests).
- :func:`read_runs`: a lock-free fold over every slot and segment, for the
  CLI and for reading runs another process wrote.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

from openfunctions.core.errors import JournalLocked
from openfunctions.core.journal import JournalLog, read_records, segment_paths

from . import _records as R
from ._errors import RunJournalError

MAX_SLOTS = 16


def runs_journal_path(data_dir: str | os.PathLike[str], slot: int = 1) -> Path:
    name = "runs.journal" if slot == 1 else f"runs.{slot}.journal"
    return Path(data_dir) / "journal" / name


class MemoryRunLog:
    """Run records folded in memory only: nothing survives the process."""

    path: Path | None = None

    def __init__(self) -> None:
        self.state: dict[str, R.RunState] = {}

    async def append(self, rtype: str, data: dict[str, Any]) -> None:
        R.apply(self.state, rtype, data)

    def get(self, run_id: str) -> R.RunState | None:
        return self.state.get(run_id)

    async def close(self) -> None:
        pass


class RunJournal(MemoryRunLog):
    """The durable run log. An append returns once the record is on disk (write + fsync)."""

    def __init__(self, log: JournalLog, state: dict[str, R.RunState]) -> None:
        self.log = log
        self.state = state
        self.path = log.path
        #: Runs this open found unfinished and closed as ``interrupted``.
        self.interrupted: list[str] = []

    @classmethod
    async def open(cls, path: str | os.PathLike[str]) -> "RunJournal":
        state: dict[str, R.RunState] = {}
        log = await JournalLog.open(path, kind=R.KIND, on_record=lambda rec: R.apply(state, rec.type, rec.data))
        self = cls(log, state)
        try:
            await self._recover()
        except BaseException:
            await log.close()
            raise
        return self

    @classmethod
    async def open_in(cls, data_dir: str | os.PathLike[str]) -> "RunJournal":
        """Open the first free slot under ``data_dir`` (see the module docstring)."""
        for slot in range(1, MAX_SLOTS + 1):
            try:
                return await cls.open(runs_journal_path(data_dir, slot))
            except JournalLocked:
                continue
        raise RunJournalError(f"all {MAX_SLOTS} run journal slots in {Path(data_dir) / 'journal'} are held by running servers")

    async def _recover(self) -> None:
        pending = R.unfinished(self.state)
        records = [
            (R.FINISHED, R.finished(run_id=r.run_id, status="interrupted", rounds=len(r.rounds),
                                    usage=_usage(r.rounds), receipts=_receipts(r.rounds), text=None,
                                    error={"code": "run_interrupted", "message": "the process ended while this run was "
                                           "in progress; it was not resumed and none of its tool calls were re-run"},
                                    recovered=True))
            for r in pending
        ]
        if records:
            await self.log.append_many(records)
            for rtype, data in records:
                R.apply(self.state, rtype, data)
        self.interrupted = [r.run_id for r in pending]

    async def append(self, rtype: str, data: dict[str, Any]) -> None:
        await self.log.append(rtype, data)
        R.apply(self.state, rtype, data)

    async def close(self) -> None:
        await self.log.close()


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


def read_runs(data_dir: str | os.PathLike[str]) -> dict[str, R.RunState]:
    """Fold every run record under ``data_dir`` without taking a lock (a live writer's tail may be missing)."""
    state: dict[str, R.RunState] = {}
    for rec in itertools.chain.from_iterable(read_records(p) for p in journal_files(data_dir)):
        R.apply(state, rec.type, rec.data)
    return state


__all__ = ["MemoryRunLog", "RunJournal", "journal_files", "read_runs", "runs_journal_path"]
