"""PgTaskLog, the task rows replicas share: one statement per write, one settle per task, orphans, cancel marks."""

from __future__ import annotations

import pytest

from openfunctions.servers._pg_tasks import open_pg_task_log
from openfunctions.store import SchemaOutOfDate, open_pg_journal

from ._journal_backends import migrated, private_database

pytestmark = pytest.mark.anyio


def _created(task_id: str, principal: str = "alice") -> tuple[str, dict]:
    return "task.created", {"v": 1, "task_id": task_id, "principal": principal, "tool": "t", "receipt_id": "rcpt_1",
                            "created_at": "2026-12-01T00:00:00Z", "ttl_ms": 60_000, "expires_at_ms": 10**15,
                            "poll_interval_ms": 1000}


async def test_records_settle_once_and_fold_in_order(pg_dsn) -> None:
    from tests._pg import unique_name

    log = await open_pg_task_log(await migrated(pg_dsn), unique_name("tools"))
    try:
        await log.create("task_a", principal="alice", instance=None, expires_at_ms=10**15, record=_created("task_a"))
        assert await log.append("task_a", ("task.status", {"task_id": "task_a", "status": "input_required"}))
        assert await log.settle("task_a", ("task.settled", {"task_id": "task_a", "status": "completed"}))
        # A second settle (a replica's late result after another's recovery) writes nothing; nor does a status.
        assert not await log.settle("task_a", ("task.settled", {"task_id": "task_a", "status": "failed"}))
        assert not await log.append("task_a", ("task.status", {"task_id": "task_a", "status": "working"}))
        assert [(t, d.get("status")) for t, d in await log.records("task_a")] == [
            ("task.created", None), ("task.status", "input_required"), ("task.settled", "completed")]
        assert await log.records("task_unknown") == []
        assert [i for i, _ in await log.records_of("alice", 0)] == ["task_a"] * 3
        assert await log.records_of("bob", 0) == [] and await log.records_of("alice", 10**16) == []
        assert await log.prune(10**16) == 1 and await log.records("task_a") == []
    finally:
        await log.close()


async def test_orphans_are_the_unsettled_tasks_of_instances_that_are_gone(pg_dsn) -> None:
    from tests._pg import unique_name

    dsn = await migrated(pg_dsn)
    name = unique_name("tools")
    journal = await open_pg_journal(dsn, name)
    log = await open_pg_task_log(dsn, name, pool=journal.pool)
    try:
        live = await journal.ensure_registered()
        await log.create("task_live", principal=None, instance=live, expires_at_ms=10**15, record=_created("task_live"))
        await log.create("task_gone", principal=None, instance="inst_gone", expires_at_ms=10**15,
                         record=_created("task_gone"))
        assert await log.orphans() == ["task_gone"]
        # A cancel mark: found for the calls a replica runs, until the task settles.
        await log.request_cancel("task_live")
        assert await log.cancels_for(["task_live", "task_gone"]) == ["task_live"]
        # Relayed tasks/update responses wait as rows; taking them deletes them (each delivered once).
        assert await log.relay_input("task_live", {"k": 1}) and await log.relay_input("task_live", {"k": "x" * 9000})
        assert await log.take_inputs(["task_gone"]) == []
        assert await log.take_inputs(["task_live"]) == [("task_live", {"k": 1}), ("task_live", {"k": "x" * 9000})]
        assert await log.take_inputs(["task_live"]) == []
        await log.settle("task_live", ("task.settled", {"task_id": "task_live", "status": "cancelled"}))
        assert await log.cancels_for(["task_live"]) == []
        assert not await log.relay_input("task_live", {"k": 2})  # settled: nothing kept
    finally:
        await log.close()
        await journal.close()


async def test_an_unmigrated_database_is_refused_with_the_command(pg_dsn) -> None:
    with private_database(pg_dsn) as fresh:
        with pytest.raises(SchemaOutOfDate, match="db migrate"):
            await open_pg_task_log(fresh, "tools")
