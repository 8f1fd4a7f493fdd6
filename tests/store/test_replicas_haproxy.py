"""Three `serve --transport http --stateless --database` replicas behind a real haproxy, one SIGKILLed under load.

Every receipt a client saw through the balancer is in the database as seen;
every replica served; the journal verifies (one seq order across replicas);
the surviving replica's sweep settles the dead one's in-flight starts `unknown`.
haproxy is Debian's package: missing, the test skips, except in CI
(`CI`/`OPENFUNCTIONS_REQUIRE_INTEROP` set), where it fails.
"""

from __future__ import annotations

import signal

import psycopg
import pytest

from openfunctions.store import migrate_database, verify_pg_journal
from tests._net import free_port

from ._journal_backends import private_database
from ._replicas import Load, db_receipts, haproxy_binary, start_haproxy, start_replica, stop, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def haproxy_bin() -> str:
    return haproxy_binary()


def test_three_replicas_behind_haproxy_one_killed_under_load(pg_dsn, haproxy_bin, tmp_path) -> None:
    import asyncio

    with private_database(pg_dsn) as db:
        asyncio.run(migrate_database(db))
        port = free_port()
        # Behind a balancer the Host header names the balancer: allow it (DNS-rebinding protection stays on).
        replicas = [start_replica(db, tmp_path / f"r{i}", None, "--allowed-host", f"127.0.0.1:{port}")
                    for i in range(3)]
        lb = start_haproxy(haproxy_bin, port, [url for url, _ in replicas], tmp_path / "haproxy.cfg")
        load = None
        try:
            load = Load(f"http://127.0.0.1:{port}/mcp", workers=4).start()
            wait_for(lambda: len(load.seen) >= 100 or load.errors > 50)
            assert len(load.seen) >= 100, (load.errors, load.last_error)
            replicas[0][1].send_signal(signal.SIGKILL)
            before = len(load.seen)
            wait_for(lambda: len(load.seen) >= before + 100)  # the survivor carries on through the balancer
            load.stop()
            # With the survivor still running (and idle), its sweep settles the dead replica's in-flight
            # calls `unknown` within a few seconds: nothing is left open, without a restart.
            wait_for(lambda: verify_pg_journal(db, "tools").unsettled == 0, timeout=30)
        finally:
            if load is not None:
                load.stop()
            lb.kill()
            lb.wait(timeout=10)
            lb.stderr.close()  # type: ignore[union-attr]
            for _, proc in replicas:
                stop(proc)
        seen = list(load.seen)
        stored = db_receipts(db)
        assert all(r["receipt_id"] in stored and stored[r["receipt_id"]] == r for r in seen)
        assert all(r["outcome"] == "succeeded" for r in seen)
        with psycopg.connect(db) as conn:
            instances = conn.execute("SELECT count(DISTINCT instance) FROM of_journal_records").fetchone()[0]
        assert instances == 3  # every replica appended to the one journal
        report = verify_pg_journal(db, "tools")
        assert report.ok, report.problems
        swept = [r for r in stored.values() if r.get("recovered")]
        assert all(r["outcome"] == "unknown" and r["error"]["code"] == "recovered_unknown" for r in swept)
        assert report.unsettled == 0
        print(f"\nhaproxy: {len(seen)} receipts seen through the balancer, all in the database; "
              f"{load.errors} call(s) failed at the kill (no reply: never a success); {len(swept)} in-flight "
              "call(s) of the dead replica settled unknown by the survivor; "
              f"{report.records} records verified")
