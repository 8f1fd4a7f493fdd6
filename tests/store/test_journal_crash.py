"""Crash test on PostgreSQL: SIGKILL a `serve --database` subprocess under load.

Every receipt a client saw is in the database, as the client saw it; what was
in flight is recovered `unknown` by the next server (never re-run); verify passes.
"""

from __future__ import annotations

import signal

import pytest

from openfunctions.store import migrate_database as migrate
from openfunctions.store import verify_pg_journal

from ._journal_backends import private_database
from ._replicas import Load, db_receipts, start_replica, stop, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def db(pg_dsn):
    """A database of its own (the journal is named for the profile, so tests must not share one), migrated."""
    import asyncio

    with private_database(pg_dsn) as dsn:
        asyncio.run(migrate(dsn))
        yield dsn


def test_sigkill_under_load_loses_no_receipt_a_client_saw(db, tmp_path) -> None:
    url, proc = start_replica(db, tmp_path / "a")
    load = Load(url, workers=4).start()
    try:
        wait_for(lambda: len(load.seen) >= 100)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        load.stop()
        stop(proc)
    seen = list(load.seen)
    stored = db_receipts(db)
    missing = [r["receipt_id"] for r in seen if r["receipt_id"] not in stored]
    assert not missing, f"{len(missing)} receipt(s) a client saw are not in the database"
    assert all(stored[r["receipt_id"]] == r for r in seen)  # exactly as the client saw it
    assert all(r["outcome"] == "succeeded" for r in seen)
    report = verify_pg_journal(db, "tools")
    assert report.ok, report.problems

    # The next server recovers the dead one's unsettled starts as unknown; verify still passes, none left open.
    url2, proc2 = start_replica(db, tmp_path / "b")
    try:
        after = db_receipts(db)
        recovered = [r for r in after.values() if r.get("recovered")]
        assert all(r["outcome"] == "unknown" and r["error"]["code"] == "recovered_unknown" for r in recovered)
        assert not {r["receipt_id"] for r in recovered} & {r["receipt_id"] for r in seen}
    finally:
        stop(proc2)
    report = verify_pg_journal(db, "tools")
    assert report.ok and report.unsettled == 0, (report.problems, report.unsettled)
    print(f"\ncrash: {len(seen)} receipts seen by clients, all in the database; {len(recovered)} in-flight "
          f"call(s) recovered unknown; {report.records} records verified")
