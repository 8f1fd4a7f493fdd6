"""A large MCP task result kept in the database's artifact store is checked against its recorded digest off the
event loop: hashing a result past 256 KiB would stall every other request of the replica meanwhile."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import anyio
import pytest

from openfunctions.servers import _tasks
from openfunctions.store import migrate_database
from tests.servers.test_tasks import Http, _create, serving

from ._journal_backends import private_database

pytestmark = pytest.mark.anyio


class _Spy:
    """``hashlib`` for servers/_tasks.py, noting for each digest whether it ran on an event loop's thread."""

    def __init__(self) -> None:
        self.on_loop: list[bool] = []

    def sha256(self, data: bytes) -> Any:
        try:
            asyncio.get_running_loop()
            self.on_loop.append(True)
        except RuntimeError:
            self.on_loop.append(False)
        return hashlib.sha256(data)


async def test_a_large_result_read_back_is_hashed_in_a_worker_thread(pg_dsn, tmp_path: Path, monkeypatch) -> None:
    spy = _Spy()
    monkeypatch.setattr(_tasks, "hashlib", spy)
    with private_database(pg_dsn) as dsn:
        await migrate_database(dsn)
        async with serving(tmp_path, database_url=dsn) as url:
            alice = Http(url, "alice-token")

            def scenario() -> dict[str, Any]:
                task_id = _create(alice, "task_big", {"size": 300_000})["taskId"]
                return alice.until(task_id, {"completed", "failed"})

            done = await anyio.to_thread.run_sync(scenario)
    assert done["status"] == "completed" and done["result"]["content"][0]["text"] == "x" * 300_000
    assert spy.on_loop and not any(spy.on_loop), spy.on_loop  # read back verified, never on the loop
