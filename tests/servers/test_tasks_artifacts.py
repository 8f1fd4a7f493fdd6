"""Large task results live in the artifact store: its quota and digest rules hold for them too."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from openfunctions.artifacts import ArtifactStore
from openfunctions.core.journal import read_records

from .test_tasks import Http
from .test_tasks_notifications import serving

pytestmark = pytest.mark.anyio


async def _big_task(url: str, size: int) -> dict[str, Any]:
    alice = Http(url, "alice-token")

    def run() -> dict[str, Any]:
        created = alice.result("tools/call", {"name": "task_big", "arguments": {"size": size}})
        return alice.until(created["taskId"], {"completed", "failed"})

    return await anyio.to_thread.run_sync(run)


async def test_a_result_past_the_stores_quota_fails_the_task_saying_so_with_the_receipt(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "small-store", quota_bytes=300_000)

    def configure(server: Any) -> None:
        server.tasks.artifacts = store

    async with serving(tmp_path, configure) as url:
        kept = await _big_task(url, 280_000)  # past the inline limit, within the quota
        refused = await _big_task(url, 400_000)  # past what is left of the quota
    store.close()
    assert kept["status"] == "completed" and kept["result"]["content"][0]["text"] == "x" * 280_000
    assert refused["status"] == "failed", refused
    error = refused["error"]
    assert error["data"]["code"] == "artifact_quota_exceeded"
    assert "could not be kept" in error["message"] and "succeeded" in error["message"]
    assert error["data"]["receipt"]["outcome"] == "succeeded"  # the call ran: the client learns that too
    assert error["data"]["certainty"] == "known"
    # Nothing past the quota was stored.
    assert sum(f.stat().st_size for f in (tmp_path / "small-store" / "blobs").iterdir()) <= 300_000


async def test_a_result_artifact_whose_bytes_changed_is_refused_not_served(tmp_path: Path) -> None:
    async with serving(tmp_path) as url:
        done = await _big_task(url, 300_000)
        meta = done["_meta"]["dev.openfunctions/task"]["resultArtifact"]
        blob = tmp_path / "data" / "artifacts" / "blobs" / meta["sha256"][7:]
        os.chmod(blob, 0o600)
        raw = bytearray(blob.read_bytes())
        raw[100:103] = b"yyy"
        blob.write_bytes(bytes(raw))
        alice = Http(url, "alice-token")
        got = await anyio.to_thread.run_sync(lambda: alice.result("tasks/get", {"taskId": done["taskId"]}))
    assert got["status"] == "completed"
    assert got["result"]["isError"] is True
    text = got["result"]["content"][0]["text"]
    assert "cannot be read back" in text and meta["id"] in text
    assert "yyy" not in json.dumps(got)  # not one changed byte reaches the client
    records = [r.data for r in read_records(tmp_path / "data" / "journal" / "tools.tasks.journal") if r.type == "task.settled"]
    assert records[0]["result_artifact"] == meta["id"]
