"""MCP tasks on both task stores, one test face: the task journal file and PostgreSQL (``database_url``).

Each test runs the task fixture tools in-process behind uvicorn (real HTTP,
bearer tokens alice/bob) on each backend and checks what a client sees: the
task's life, its records folded by the one ``apply``, principal scoping,
cancel, input requests, a result kept as an artifact, the principal's list.
What a process crash leaves is tested with real SIGKILLs per backend:
``test_tasks.py`` (file) and ``test_tasks_replicas.py`` (PostgreSQL, two replicas).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from openfunctions.core.journal import read_records
from tests._pg import pg_dsn  # noqa: F401  (a fixture)
from tests.store._journal_backends import private_database

from .test_tasks import Http, _create, serving

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["file", "postgresql"])
def backend(request) -> dict[str, Any]:
    """``create_mcp_server`` options of the backend (a private, migrated database for PostgreSQL)."""
    if request.param == "file":
        yield {}
        return
    from openfunctions.store import migrate_database

    with private_database(request.getfixturevalue("pg_dsn")) as dsn:
        asyncio.run(migrate_database(dsn))
        yield {"database_url": dsn}


def _records(backend: dict[str, Any], tmp_path: Path, task_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The task's records as the backend stores them, in order."""
    if "database_url" not in backend:
        path = tmp_path / "data" / "journal" / "tools.tasks.journal"
        return [(r.type, r.data) for r in read_records(path) if r.data.get("task_id") == task_id]
    import psycopg

    with psycopg.connect(backend["database_url"]) as conn:
        rows = conn.execute("SELECT type, data FROM of_task_records WHERE task_id = %s ORDER BY seq", (task_id,))
        return [(t, json.loads(d)) for t, d in rows]


async def test_a_task_lives_and_settles_as_its_records_say(backend, tmp_path: Path) -> None:
    async with serving(tmp_path, **backend) as url:
        alice = Http(url, "alice-token")

        def scenario() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
            created = _create(alice, "task_quick", {"text": "kept"})
            done = alice.until(created["taskId"], {"completed"})
            return created, done, alice.result("tasks/get", {"taskId": created["taskId"]})

        created, done, again = await anyio.to_thread.run_sync(scenario)
    assert done["result"]["structuredContent"] == {"answer": 42, "text": "kept"}
    assert done["result"]["_meta"]["dev.openfunctions/receipt"]["outcome"] == "succeeded"
    assert again == done and done["createdAt"] == created["createdAt"]
    recs = _records(backend, tmp_path, created["taskId"])
    assert [t for t, _ in recs] == ["task.created", "task.settled"]
    assert recs[0][1]["principal"] == "alice" and recs[1][1]["result"] == done["result"]


async def test_another_principal_gets_exactly_the_unknown_id_error(backend, tmp_path: Path) -> None:
    async with serving(tmp_path, **backend) as url:
        alice, bob = Http(url, "alice-token"), Http(url, "bob-token")

        def scenario() -> tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]:
            task_id = _create(alice, "task_quick", {"text": "secret"})["taskId"]
            alice.until(task_id, {"completed"})
            unknown_id = "task_" + "f" * 32
            return (task_id, bob.rpc("tasks/get", {"taskId": task_id}), bob.rpc("tasks/get", {"taskId": unknown_id}),
                    bob.rpc("tasks/cancel", {"taskId": task_id}))

        task_id, stolen, unknown, cancel = await anyio.to_thread.run_sync(scenario)
    assert stolen["error"]["code"] == unknown["error"]["code"] == cancel["error"]["code"] == -32602
    assert stolen["error"]["message"].replace(task_id, "ID") == unknown["error"]["message"].replace("task_" + "f" * 32, "ID")
    assert "secret" not in json.dumps(stolen)


async def test_cancel_reaches_the_handler_and_settles_cancelled(backend, tmp_path: Path) -> None:
    markers = tmp_path / "m"
    async with serving(tmp_path, **backend) as url:
        alice = Http(url, "alice-token")

        def scenario() -> dict[str, Any]:
            from .conftest import wait_for_file

            task_id = _create(alice, "task_slow", {"dir": str(markers)})["taskId"]
            wait_for_file(markers / "started")
            assert alice.result("tasks/cancel", {"taskId": task_id})["resultType"] == "complete"
            wait_for_file(markers / "cancelled")
            return alice.until(task_id, {"cancelled", "completed", "failed"})

        got = await anyio.to_thread.run_sync(scenario)
    assert got["status"] == "cancelled"
    assert [t for t, _ in _records(backend, tmp_path, got["taskId"])] == ["task.created", "task.settled"]


async def test_input_required_then_tasks_update_completes(backend, tmp_path: Path) -> None:
    async with serving(tmp_path, **backend) as url:
        alice = Http(url, "alice-token")

        def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
            task_id = _create(alice, "task_ask", {})["taskId"]
            waiting = alice.until(task_id, {"input_required"})
            alice.result("tasks/update", {"taskId": task_id,
                                          "inputResponses": {"color": {"action": "accept", "content": {"color": "teal"}}}})
            return waiting, alice.until(task_id, {"completed", "failed"})

        waiting, done = await anyio.to_thread.run_sync(scenario)
    assert list(waiting["inputRequests"]) == ["color"]
    assert done["status"] == "completed" and done["result"]["structuredContent"] == {"color": "teal"}
    recs = _records(backend, tmp_path, done["taskId"])
    assert [(t, d.get("status")) for t, d in recs] == [
        ("task.created", None), ("task.status", "input_required"), ("task.status", "working"), ("task.settled", "completed")]


async def test_a_large_result_is_an_artifact_read_back_verified(backend, tmp_path: Path) -> None:
    async with serving(tmp_path, **backend) as url:
        alice = Http(url, "alice-token")

        def scenario() -> dict[str, Any]:
            task_id = _create(alice, "task_big", {"size": 300_000})["taskId"]
            return alice.until(task_id, {"completed", "failed"})

        done = await anyio.to_thread.run_sync(scenario)
    assert done["status"] == "completed" and done["result"]["content"][0]["text"] == "x" * 300_000
    settled = [d for t, d in _records(backend, tmp_path, done["taskId"]) if t == "task.settled"]
    assert len(settled) == 1 and "result" not in settled[0]
    assert settled[0]["result_artifact"] == done["_meta"]["dev.openfunctions/task"]["resultArtifact"]["id"]


async def test_the_principals_list_holds_its_tasks_only(backend, tmp_path: Path) -> None:
    holder: dict[str, Any] = {}
    async with serving(tmp_path, configure=lambda s: holder.setdefault("server", s), **backend) as url:
        alice, bob = Http(url, "alice-token"), Http(url, "bob-token")

        def scenario() -> tuple[list[str], str]:
            mine = [_create(alice, "task_quick", {"text": str(i)})["taskId"] for i in range(3)]
            theirs = _create(bob, "task_quick", {"text": "b"})["taskId"]
            for t in mine:
                alice.until(t, {"completed"})
            return mine, theirs

        mine, theirs = await anyio.to_thread.run_sync(scenario)
        store = holder["server"].tasks.store
        listed = await store.of_principal("alice")
        assert sorted(t.task_id for t in listed) == sorted(mine)
        assert all(t.status == "completed" for t in listed)
        assert [t.task_id for t in await store.of_principal("bob")] == [theirs]
        assert await store.of_principal(None) == []


async def test_a_cancel_mark_whose_notification_was_missed_is_found_by_the_sweep(
        pg_dsn, tmp_path: Path, monkeypatch) -> None:  # noqa: F811
    """PostgreSQL only: the running replica missed the NOTIFY (set the mark by hand); its next sweep cancels."""
    import psycopg

    from openfunctions.store import migrate_database
    from openfunctions.store._pg import SWEEP_ENV

    monkeypatch.setenv(SWEEP_ENV, "0.3")  # the sweep is what is tested: sooner than its 5 s default

    markers = tmp_path / "m"
    with private_database(pg_dsn) as dsn:
        await migrate_database(dsn)
        async with serving(tmp_path, database_url=dsn) as url:
            alice = Http(url, "alice-token")

            def scenario() -> dict[str, Any]:
                from .conftest import wait_for_file

                task_id = _create(alice, "task_slow", {"dir": str(markers)})["taskId"]
                wait_for_file(markers / "started")
                with psycopg.connect(dsn, autocommit=True) as conn:  # a mark with no notification
                    conn.execute("UPDATE of_tasks SET cancel_requested = true WHERE task_id = %s", (task_id,))
                wait_for_file(markers / "cancelled", timeout=30)  # only the sweep can find the mark
                return alice.until(task_id, {"cancelled", "completed", "failed"})

            got = await anyio.to_thread.run_sync(scenario)
    assert got["status"] == "cancelled"


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "nan", "inf"])
def test_a_bad_sweep_interval_is_refused_by_name(monkeypatch, raw) -> None:
    from openfunctions.core.errors import ConfigurationError
    from openfunctions.store import database_sweep_interval as sweep_interval
    from openfunctions.store._pg import SWEEP_ENV, SWEEP_INTERVAL

    monkeypatch.delenv(SWEEP_ENV, raising=False)
    assert sweep_interval() == SWEEP_INTERVAL
    monkeypatch.setenv(SWEEP_ENV, "0.25")
    assert sweep_interval() == 0.25
    monkeypatch.setenv(SWEEP_ENV, raw)
    with pytest.raises(ConfigurationError, match=f"OPENFUNCTIONS_DATABASE_SWEEP_S must be a positive number of "
                                                 f"seconds, got '{raw}'"):
        sweep_interval()
