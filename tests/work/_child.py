"""A work controller in its own process, driven line by line over stdin/stdout.

Used by the crash and lease tests (real processes, SIGKILL / SIGSTOP).
Usage: ``python _child.py DATA_DIR CATALOG [--ttl S] [--renew S] [--principal P] [--database URL --space S]``
(``--database``: lease, attempts and grants in PostgreSQL, ``openfunctions.work._pg.open_pg_work``, shared mode).
Each stdin line is a JSON command ``{"op": ..., ...}``; each reply is one
JSON line ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": {...}}``.
``{"op": "open"}`` must come first. Step tools come from the real
``create_step_tools`` of the catalog (command steps run real subprocesses).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path

from openfunctions.artifacts import ArtifactStore
from openfunctions.core import OpenFunctionsError, ToolDefinition, ToolRegistry
from openfunctions.work._authority import Authority
from openfunctions.work._catalog import Catalog
from openfunctions.work._controller import WorkController
from openfunctions.work._grants import GrantStore
from openfunctions.work._steps import create_step_tools


def _paused(tool: ToolDefinition, mark: Path) -> ToolDefinition:
    """The same tool, but after its real work it records that it ran and hangs:
    the crash window between the effect and the controller's outcome record."""
    real = tool.handler

    async def handler(params: dict, ctx) -> dict:
        out = await real(params, ctx)
        with open(mark, "a") as f:
            f.write("ran\n")
        await asyncio.sleep(3600)
        return out

    return dataclasses.replace(tool, handler=handler)


def emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data_dir")
    ap.add_argument("catalog")
    ap.add_argument("--ttl", type=float, default=30.0)
    ap.add_argument("--renew", type=float, default=None)
    ap.add_argument("--principal", default="agent")
    ap.add_argument("--pause-after", default=None, help="step whose tool, after doing its work, marks pause.mark and hangs")
    ap.add_argument("--database", default=None, help="the work space's rows in this PostgreSQL (shared backend)")
    ap.add_argument("--space", default="work")
    a = ap.parse_args()
    catalog = Catalog.load(a.catalog)
    store = ArtifactStore(Path(a.data_dir) / "work" / "artifacts")
    tools = create_step_tools(catalog, store=store)
    if a.pause_after:
        tools = [_paused(t, Path(a.data_dir) / "pause.mark") if t.name == "of_step." + a.pause_after else t for t in tools]
    registry = ToolRegistry(tools)
    backend = None
    if a.database:
        from openfunctions.store import settled_pg_receipts
        from openfunctions.work._pg import open_pg_work

        backend = await open_pg_work(a.database, a.space, ttl=a.ttl, receipts=settled_pg_receipts)
    authority = Authority(backend.grants if backend else GrantStore.in_data_dir(a.data_dir), catalog)
    ctl: WorkController | None = None
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            break
        cmd = json.loads(line)
        op = cmd.pop("op")
        try:
            if op == "open":
                ctl = await WorkController.open(
                    Path(a.data_dir) / "work", catalog=catalog, registry=registry, authority=authority,
                    lease_ttl=a.ttl, renew_every=a.renew, artifacts=store, backend=backend,
                )
                result = {"generation": ctl.lease.generation if ctl.lease else None}
            elif op == "close":
                assert ctl is not None
                await ctl.close()
                emit({"ok": True, "result": None})
                break
            else:
                assert ctl is not None, "open first"
                if op == "preview":
                    result = await ctl.preview(cmd["plan"], principal=a.principal)
                elif op == "start":
                    result = await ctl.start(cmd["preview_id"], principal=a.principal)
                elif op == "run":
                    emit({"ok": True, "event": "dispatching"})
                    result = await ctl.run_step(principal=a.principal, step=cmd.get("step"))
                elif op == "status":
                    await ctl.refresh()
                    result = ctl.status(principal=a.principal)
                elif op == "snapshot":
                    result = json.loads(json.dumps(ctl.state.snapshot(), default=str))
                elif op == "reconcile":
                    result = await ctl.reconcile(principal=a.principal)
                elif op == "verify":
                    result = await ctl.verify(principal=a.principal)
                elif op == "complete":
                    result = await ctl.complete(principal=a.principal)
                else:
                    raise ValueError(f"unknown op {op!r}")
            emit({"ok": True, "result": result})
        except OpenFunctionsError as exc:
            emit({"ok": False, "error": exc.to_dict()})
    if ctl is not None:
        await ctl.close()


if __name__ == "__main__":
    asyncio.run(main())
