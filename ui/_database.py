"""The viewer over the PostgreSQL database server replicas share (``serve --database URL``): ``ui --database URL``.

The same interface as :class:`~openfunctions.ui._records.DataDir`, read through the store package's readers:

| stream | reader |
|---|---|
| receipts | ``store._pg_journal_read.read_records`` (every execution journal, its streams merged by time) |
| journal verify | ``store.verify_pg_journal`` per journal (what ``journal verify --database`` checks) |
| agent runs | ``agents._runlog.read_runs_in_database`` (the newest 1,000 runs of the space) |
| workflow runs | ``workflows.WorkflowRuns(database=URL, space=S)`` |
| work attempts | the work space's attempt rows and inbox (``work ... --database``: the same code) |

Not read from a database (yet): MCP tasks and chat conversations (the lists
stay empty), artifacts. Everything is read-only: no registration, no lock.
A read is cached until :meth:`Database.signature` (a handful of indexed
``max(seq)`` reads, what the live updates poll) changes.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from ._records import DataDir

_T = TypeVar("_T")


class Database(DataDir):
    """The record streams of one PostgreSQL database (``space``: the agent-run and workflow-run space)."""

    #: how often a live view asks the database whether anything changed (seconds; five indexed reads)
    poll_s = 1.0

    def __init__(self, url: str, *, space: str = "default") -> None:
        from openfunctions.store import redact_dsn

        self.url, self.space = url, space
        self.where = redact_dsn(url)
        self._memos: dict[str, tuple[Any, Any]] = {}
        self._lock = threading.Lock()
        self.problems: dict[str, str] = {}

    @property
    def files_root(self) -> Path | None:
        return None  # no artifacts in a database (module docstring)

    @property
    def place(self) -> str:
        return '--database "$OPENFUNCTIONS_DATABASE_URL"' + (f" --space {self.space}" if self.space != "default" else "")

    def changed(self, before: Any, after: Any) -> list[str]:
        return ["database"] if before != after else []

    # -- what changed ------------------------------------------------------------

    def signature(self) -> tuple[Any, ...]:
        """The newest seq of every journal stream and record table: changes whenever a record is appended."""
        import psycopg

        queries = ("SELECT coalesce(json_agg(json_build_array(journal, stream, last_seq) ORDER BY journal, stream)::text, "
                   "'[]') FROM of_journal_streams",
                   "SELECT coalesce(max(seq), 0) FROM of_run_records",
                   "SELECT coalesce(max(seq), 0) FROM of_workflow_records WHERE space = %(space)s",
                   "SELECT coalesce(max(seq), 0) FROM of_work_records",
                   "SELECT count(*) FROM of_work_resolutions")
        out: list[Any] = []
        with psycopg.connect(self.url, autocommit=True, connect_timeout=10) as conn:
            for q in queries:
                try:
                    row = conn.execute(q, {"space": self.space}).fetchone()
                    out.append(row[0] if row is not None else None)  # an aggregate: one row, always
                except psycopg.errors.UndefinedTable:  # that component was never migrated here
                    out.append(None)
                except psycopg.Error as exc:
                    out.append(f"unreadable: {exc}")
        return tuple(out)

    def _memo(self, key: str, kinds: tuple[str, ...], build: Callable[[], _T]) -> _T:
        with self._lock:
            sig = self.signature()
        held = self._memos.get(key)
        if held is not None and held[0] == sig:
            return cast(_T, held[1])  # one key, one build: the value is what this key's build returned
        value = build()
        self._memos[key] = (sig, value)
        return value

    def streams(self) -> list[Any]:
        return []

    def verify(self) -> list[dict[str, Any]]:
        from openfunctions.store import verify_pg_journal
        from openfunctions.store._pg_journal import list_pg_journals

        def build() -> list[dict[str, Any]]:
            out = []
            for name in list_pg_journals(self.url):
                r = verify_pg_journal(self.url, name)
                out.append({"path": f"{self.where} journal {name}", "kind": "receipts", "size": None,
                            "records": r.records, "last_seq": None, "ok": r.ok,
                            "error": "; ".join(r.problems[:3]) or None,
                            "command": f"openfunctions-mcp journal verify --database URL --journal {name}"})
            return out
        return self._memo("verify", (), build)

    # -- the streams -------------------------------------------------------------

    def _receipts(self) -> dict[str, dict[str, Any]]:
        import json

        from openfunctions.store._pg_journal_read import read_records

        out: dict[str, dict[str, Any]] = {}
        for rec in read_records(self.url, types=("start", "receipt")):
            data = json.loads(rec.data)
            rid = data.get("receipt_id")
            if not isinstance(rid, str):
                continue
            if rec.type == "start":
                out.setdefault(rid, {**data, "outcome": "running", "certainty": "unknown", "journal": rec.journal,
                                     "start": True})
            else:
                started = out.get(rid, {})
                out[rid] = {**data, "journal": rec.journal, "seq": rec.seq, "start": bool(started.get("start"))}
        return out

    def agent_runs(self) -> dict[str, Any]:
        import anyio

        from openfunctions.agents._runlog import read_runs_in_database

        return self._memo("agent_runs", (), lambda: self._read(
            "agent runs", lambda: anyio.run(lambda: read_runs_in_database(self.url, space=self.space)), {}))

    def _workflows(self) -> Any:
        from openfunctions.workflows import WorkflowRuns

        return WorkflowRuns(database=self.url, space=self.space)

    def workflow_runs(self) -> list[dict[str, Any]]:
        return self._memo("workflow_runs", (), lambda: self._read(
            "workflow runs", lambda: self._workflows().list(), []))

    def workflow_states(self) -> dict[str, Any]:
        return self._memo("workflow_states", (), lambda: self._read(
            "workflow runs", lambda: {k: v for k, v in self._workflows()._read().items() if v.status != "new"}, {}))

    def _work_args(self) -> argparse.Namespace:
        return argparse.Namespace(work_data_dir=None, work_database=self.url)

    def work_state(self) -> Any:
        from openfunctions.work import attempts_cli
        from openfunctions.work._recovery import replay

        return self._memo("work_state", (), lambda: self._read(
            "work attempts", lambda: attempts_cli._state(self._work_args()), replay([])))

    def uncertain_operations(self) -> list[dict[str, Any]]:
        from openfunctions.work import attempts_cli

        return self._memo("uncertain", (), lambda: self._read(
            "work attempts", lambda: attempts_cli._uncertain(self._work_args()), []))

    def _tasks(self) -> list[dict[str, Any]]:
        return []

    def _conversations(self) -> list[dict[str, Any]]:
        return []


__all__ = ["Database"]
