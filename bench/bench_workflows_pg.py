"""Cost of a durable workflow run on PostgreSQL against the same run on files and against raw inserts.

    .venv/bin/python bench/bench_workflows_pg.py [--runs 30] [--rounds 7] [--database URL]

A 3-step workflow (a read tool, a write tool, a transform; no execution journal on
the registry, so only the run journal is measured). Each durable run writes two
batches: ``run_started`` + the read's result + the write step's ``step_started``
(before the write tool runs), then the write's and the transform's results +
``run_finished``. Modes, interleaved round by round in a new random order:

- ``file``: ``WorkflowRuns(data_dir)`` held open (two fdatasyncs of the run journal per run);
- ``database``: ``WorkflowRuns(database=URL)`` held open (two committed multi-row INSERTs per run);
- ``raw``: two autocommit single-row ``INSERT``s per run on one psycopg connection into a
  table of the same shape: the floor a hand-written durable insert pays;
- ``memory``: ``wf.run(x)`` (nothing durable), for scale.

Without ``--database`` a private PostgreSQL is started with ``pgserver`` (Unix
socket; synchronous_commit and fsync on). Prints the median per run (µs) over
rounds and the ratios database/file and database/raw. Nothing is written to docs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pg import pg_server  # noqa: E402

from openfunctions.core import ToolRegistry, define_tool  # noqa: E402
from openfunctions.store import migrate_database  # noqa: E402
from openfunctions.workflows import WorkflowRuns, pipe, tool_step  # noqa: E402


async def _look(p, ctx):
    return {"n": p["n"] + 1}


async def _put(p, ctx):
    return {"n": p["n"] * 2}


def _workflow():
    reg = ToolRegistry([
        define_tool(name="look", description="a read", handler=_look, capability={"effect": "read"}),
        define_tool(name="put", description="a write", handler=_put, capability={"effect": "write"}),
    ])
    return pipe(tool_step("look"), tool_step("put"), lambda r: r["n"] + 1, name="bench", registry=reg)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30, help="runs per mode per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--database", default=None, help="an existing database (default: a private pgserver)")
    args = ap.parse_args()
    import psycopg

    with pg_server(args.database) as url:
        await migrate_database(url)
        wf = _workflow()
        space = f"bench-{os.getpid()}"
        raw = await psycopg.AsyncConnection.connect(url, autocommit=True)
        await raw.execute("CREATE TABLE IF NOT EXISTS bench_wf_raw (space text, seq bigint, type text, time text, "
                          "data text, PRIMARY KEY (space, seq))")
        with tempfile.TemporaryDirectory() as d:
            on_file = await WorkflowRuns(d, workflows=[wf]).open()
            on_db = await WorkflowRuns(database=url, space=space, workflows=[wf]).open()
            seq = 0
            counter = 0

            async def file_run() -> None:
                nonlocal counter
                counter += 1
                assert (await on_file.run(wf, {"n": counter}, run_id=f"f{counter}")).ok

            async def db_run() -> None:
                nonlocal counter
                counter += 1
                assert (await on_db.run(wf, {"n": counter}, run_id=f"d{counter}")).ok

            async def raw_run() -> None:
                nonlocal seq
                for _ in range(2):
                    seq += 1
                    await raw.execute("INSERT INTO bench_wf_raw VALUES (%s, %s, %s, %s, %s)",
                                      (space, seq, "step_settled", "2026-01-01T00:00:00.000000Z", '{"run_id":"x","n":1}'))

            async def mem_run() -> None:
                await wf.run({"n": 1})

            modes = {"file": file_run, "database": db_run, "raw": raw_run, "memory": mem_run}
            per: dict[str, list[float]] = {m: [] for m in modes}
            for fn in modes.values():  # warm up
                await fn()
            for _ in range(args.rounds):
                order = list(modes)
                random.shuffle(order)
                for m in order:
                    t0 = time.perf_counter()
                    for _ in range(args.runs):
                        await modes[m]()
                    per[m].append((time.perf_counter() - t0) / args.runs * 1e6)
            await on_file.close()
            await on_db.close()
        await raw.execute("DROP TABLE bench_wf_raw")
        await raw.close()
    med = {m: statistics.median(v) for m, v in per.items()}
    print(f"durable run of a 3-step workflow (read, write, transform); {args.runs} runs x {args.rounds} rounds; "
          "median of rounds, µs per run [min..max of rounds]")
    for m, v in per.items():
        print(f"  {m:<9} {med[m]:10.0f}   [{min(v):.0f}..{max(v):.0f}]")
    print(f"  database / file = {med['database'] / med['file']:.2f}x   database / raw (2 inserts) = "
          f"{med['database'] / med['raw']:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
