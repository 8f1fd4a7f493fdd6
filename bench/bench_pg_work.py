"""Cost of one work call on the PostgreSQL backend against the file backend, in one run.

One controller runs a plan of N ``read_file`` steps (each ``of_work_run_step``
is a lifecycle call: on files under the lease the process holds; on PostgreSQL
``shared``: take the lease, fold what others appended, append, give it back).
Rounds interleave the backends; the medians and their ratio are printed. The
third row runs the same steps on PostgreSQL through the ``of_work_run_step``
tool (``create_work_tools``: the MCP layer's handler, without a transport), which
adds the tool's readiness check and reply bounding to the controller's call.

    python bench/bench_pg_work.py --steps 40 --rounds 5 [--database URL]

Without ``--database`` it starts a private PostgreSQL with ``pgserver`` (the
test extra). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pg import pg_server  # noqa: E402

from openfunctions.artifacts import ArtifactStore  # noqa: E402
from openfunctions.core import ToolRegistry  # noqa: E402
from openfunctions.work import Authority, Catalog, WorkController, create_step_tools, create_work_tools, file_backend  # noqa: E402

CATALOG = """version = 1
workspace = "ws"
[steps.look]
kind = "read_file"
description = "read a file"
paths = ["**"]
"""


async def one_round(root: Path, backend, steps: int, *, via_tools: bool = False) -> float:
    (root / "ws").mkdir(parents=True, exist_ok=True)
    (root / "ws" / "a.txt").write_text("hello")
    (root / "catalog.toml").write_text(CATALOG)
    catalog = Catalog.load(root / "catalog.toml")
    await backend.aopen()
    await backend.grants.issue(principal="agent", steps=["look"], paths=["**"], ttl=_dt.timedelta(hours=1))
    store = ArtifactStore(root / "artifacts")
    ctl = await WorkController.open(root / "work", catalog=catalog, registry=ToolRegistry(create_step_tools(catalog, store=store)),
                                    authority=Authority(backend.grants, catalog), backend=backend, execution_journals=None)
    try:
        prv = await ctl.preview([{"step": "look", "params": {"path": "a.txt"}}] * steps, principal="agent")
        await ctl.start(prv["previewId"], principal="agent")
        tools = ToolRegistry(create_work_tools(ctl, principal="agent"))
        t0 = time.perf_counter()
        for _ in range(steps):
            if via_tools:
                await tools.execute("of_work_run_step", {})
            else:
                await ctl.run_step(principal="agent")
        return (time.perf_counter() - t0) / steps * 1e6
    finally:
        await ctl.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--database", default=None)
    a = ap.parse_args()
    from openfunctions.store import migrate_database
    from openfunctions.work._pg import pg_work_backend

    files, pg, pg_tools = [], [], []
    with pg_server(a.database) as dsn, tempfile.TemporaryDirectory() as tmp:
        await migrate_database(dsn)
        for r in range(a.rounds):
            root = Path(tmp) / f"f{r}"
            files.append(await one_round(root, file_backend(root / "work"), a.steps))
            pg.append(await one_round(Path(tmp) / f"p{r}", pg_work_backend(dsn, f"bench{r}_{time.time_ns()}"), a.steps))
            pg_tools.append(await one_round(Path(tmp) / f"t{r}", pg_work_backend(dsn, f"bencht{r}_{time.time_ns()}"),
                                            a.steps, via_tools=True))
    f, p, pt = statistics.median(files), statistics.median(pg), statistics.median(pg_tools)
    print(f"| backend | µs per run_step (median of {a.rounds} rounds of {a.steps}) |")
    print("|---|---|")
    print(f"| files (lease held by the process) | {f:,.0f} |")
    print(f"| PostgreSQL (lease taken per call) | {p:,.0f} |")
    print(f"| PostgreSQL, through the of_work_run_step tool | {pt:,.0f} |")
    print(f"| **PostgreSQL / files** | {p / f:.2f}x |")


if __name__ == "__main__":
    asyncio.run(main())
