"""A large MCP task result kept in the database's artifact store is checked against its recorded digest off the
event loop: hashing a result past 256 KiB would stall every other request of the replica meanwhile."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest

from openfunctions.servers import _tasks
from openfunctions.store import migrate_database
from tests.servers.test_tasks_backends import (
    test_a_large_result_is_an_artifact_read_back_verified as _large_result_round_trip,
)

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
    """The served round trip of tests/servers/test_tasks_backends.py (a 300 kB result, through uvicorn), on the
    database, with every digest of servers/_tasks.py watched."""
    spy = _Spy()
    monkeypatch.setattr(_tasks, "hashlib", spy)
    with private_database(pg_dsn) as dsn:
        await migrate_database(dsn)
        await _large_result_round_trip({"database_url": dsn}, tmp_path)
    assert spy.on_loop and not any(spy.on_loop), spy.on_loop  # read back verified, never on the loop
