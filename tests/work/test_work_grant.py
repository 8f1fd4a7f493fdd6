"""A step tool reads what the work controller grants it from ``ctx.work`` (a ``WorkGrant``); the old metadata keys
(``granted_paths``, ``artifact_scope``, ``operation_id``, ``on_spawn``) are still read when there is none."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from openfunctions.artifacts import ArtifactStore
from openfunctions.core import ToolExecutionContext, ToolRegistry, WorkGrant
from openfunctions.work._catalog import Catalog
from openfunctions.work._steps import create_step_tools

pytestmark = pytest.mark.anyio

CATALOG = f"""
version = 1
workspace = "ws"

[steps.write_src]
kind = "write_file"
description = "write under src"
paths = ["src/**"]
max_bytes = 1000

[steps.env]
kind = "command"
description = "print the operation marker"
argv = ["{sys.executable}", "-c", "import os, json; print(json.dumps(os.environ.get('OPENFUNCTIONS_WORK_OPERATION')))"]
effect = "write"
"""


def _registry(tmp: Path) -> tuple[ToolRegistry, ArtifactStore]:
    (tmp / "ws" / "src").mkdir(parents=True)
    (tmp / "c.toml").write_text(CATALOG)
    store = ArtifactStore(tmp / "artifacts")
    return ToolRegistry(create_step_tools(Catalog.load(tmp / "c.toml"), store=store)), store


async def test_a_step_reads_its_grant_from_ctx_work(tmp_path: Path) -> None:
    reg, store = _registry(tmp_path)
    spawned: list[int] = []

    async def on_spawn(pid: int) -> None:
        spawned.append(pid)

    grant = WorkGrant(attempt_id="att_1", operation_id="op_7", granted_paths=("src/**",), artifact_scope="att_1",
                      on_spawn=on_spawn)
    ctx = ToolExecutionContext(principal="agent", work=grant)
    wrote = await reg.execute_detailed("of_step.write_src", {"path": "src/a.txt", "content": "hi"}, ctx)
    assert wrote.ok, wrote.error
    assert (tmp_path / "ws" / "src" / "a.txt").read_text() == "hi"
    outside = await reg.execute_detailed("of_step.write_src", {"path": "src/b.txt", "content": "x"},
                                         ctx.replace(work=WorkGrant(granted_paths=("docs/**",))))
    assert outside.error is not None and outside.error.code == "path_outside_grant"
    ran = await reg.execute_detailed("of_step.env", {}, ctx)
    assert ran.ok, ran.error
    assert len(spawned) == 1  # on_spawn was called with the command's pid
    out = ran.value["stdout"]
    assert out["tail"].strip() == json.dumps("op_7")  # the operation marker came from ctx.work.operation_id
    assert (await store.stat(out["artifact_id"])).scope == "att_1"  # stored under ctx.work.artifact_scope


async def test_no_grant_refuses_a_path_step(tmp_path: Path) -> None:
    reg, _ = _registry(tmp_path)
    r = await reg.execute_detailed("of_step.write_src", {"path": "src/a.txt", "content": "hi"},
                                   ToolExecutionContext(work=WorkGrant(artifact_scope="att_1")))
    assert r.error is not None and r.error.code == "path_outside_grant" and "ctx.work.granted_paths" in r.error.message
    assert not (tmp_path / "ws" / "src" / "a.txt").exists()


async def test_the_old_metadata_keys_are_still_read(tmp_path: Path) -> None:
    reg, _ = _registry(tmp_path)
    spawned: list[int] = []

    async def on_spawn(pid: int) -> None:
        spawned.append(pid)

    md: dict[str, Any] = {"granted_paths": ["src/**"], "artifact_scope": "att_1", "operation_id": "op_old",
                          "on_spawn": on_spawn}
    ctx = ToolExecutionContext(metadata=md)
    assert (await reg.execute_detailed("of_step.write_src", {"path": "src/a.txt", "content": "hi"}, ctx)).ok
    ran = await reg.execute_detailed("of_step.env", {}, ctx)
    assert ran.ok and ran.value["stdout"]["tail"].strip() == json.dumps("op_old") and len(spawned) == 1
