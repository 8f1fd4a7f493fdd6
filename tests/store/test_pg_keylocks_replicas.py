"""Conflict keys across real ``serve --stateless --database`` replicas (subprocesses on 127.0.0.1).

Two replicas serve ``keyed`` (a write with ``conflict_keys: ["/key"]``); its
handler holds the key until the test says so and marks any overlap. A call
for the same key through the other replica waits in PostgreSQL (seen as an
advisory lock wait in ``pg_stat_activity``) and runs only after the holder
finishes — or after the holder's process is SIGKILLed.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path

import psycopg
import pytest

from openfunctions.store import migrate_database, verify_pg_journal

from ._journal_backends import private_database
from ._replicas import receipt_of, start_replica, stop, tool_call, wait_for

pytestmark = pytest.mark.slow


def _advisory_waiters(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND wait_event = 'advisory' AND datname = current_database()").fetchone()[0]


class _Call(threading.Thread):
    def __init__(self, url: str, args: dict) -> None:
        super().__init__(daemon=True)
        self.url, self.args = url, args
        self.result: dict | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = tool_call(self.url, "keyed", self.args, timeout=120)
        except BaseException as exc:  # noqa: BLE001 (the test reads it)
            self.error = exc


def test_two_replicas_never_overlap_a_key_and_a_killed_holder_frees_it(pg_dsn, tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    with private_database(pg_dsn) as dsn:
        asyncio.run(migrate_database(dsn))
        (url_a, a), (url_b, b) = (start_replica(dsn, tmp_path / n) for n in ("a", "b"))
        try:
            def call(url: str, key: str, tag: str) -> _Call:
                c = _Call(url, {"key": key, "dir": str(marks), "tag": tag})
                c.start()
                return c

            # 1. same key through both replicas: the second waits in the database, then runs
            first = call(url_a, "k1", "a1")
            wait_for(lambda: (marks / "entered-a1").exists())
            second = call(url_b, "k1", "b1")
            wait_for(lambda: _advisory_waiters(dsn) == 1)
            assert not (marks / "entered-b1").exists()
            # a different key through replica B runs meanwhile
            other = call(url_b, "k9", "b9")
            wait_for(lambda: (marks / "entered-b9").exists())
            (marks / "release-b9").touch()
            (marks / "release-a1").touch()
            wait_for(lambda: (marks / "entered-b1").exists())
            (marks / "release-b1").touch()
            for c in (first, second, other):
                c.join(120)
                assert c.error is None and receipt_of(c.result)["outcome"] == "succeeded", (c.error, c.result)

            # 2. the holder is SIGKILLed mid-call: its key is freed, the waiting replica's write runs
            held = call(url_a, "k2", "a2")
            wait_for(lambda: (marks / "entered-a2").exists())
            waiting = call(url_b, "k2", "b2")
            wait_for(lambda: _advisory_waiters(dsn) == 1)
            assert not (marks / "entered-b2").exists()
            a.send_signal(signal.SIGKILL)
            a.wait(10)
            wait_for(lambda: (marks / "entered-b2").exists())
            (marks / "release-b2").touch()
            waiting.join(120)
            assert waiting.error is None and receipt_of(waiting.result)["outcome"] == "succeeded"
            held.join(30)
            assert held.result is None  # no reply from a killed replica
            assert not (marks / "overlap").exists(), (marks / "overlap").read_text()
            # the survivor's sweep settles the killed call unknown; every stream verifies
            wait_for(lambda: verify_pg_journal(dsn, "tools").unsettled == 0, timeout=60)
            report = verify_pg_journal(dsn, "tools")
            assert report.ok and report.streams == 2, report
        finally:
            stop(a)
            stop(b)
