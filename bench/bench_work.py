"""Work controller benchmarks: per-step overhead and recovery time.

1. Per step: ``WorkController.run_step`` on a no-op step (journal on, every
   record fsynced, lease fenced, grant checked) against the peer, a bare
   ``registry.execute_detailed`` of the same tool through the same executor.
   A read step writes one journal record (its outcome); a write step three
   (intent, dispatched, outcome).
2. Recovery: ``WorkController.open`` on a data directory holding N
   completed attempts (lease, read + replay of every record, restore), against
   the peer, the journal's own validating read of the same files
   (``read_records``) — so the ratio is what replay adds to reading.

The N attempts are the records of one real completed attempt (preview,
start, step outcome, verification, transitions) replayed with fresh ids;
they are appended concurrently so the journal's group commit shares fsyncs
(a real controller would have taken one fsync per record, over hours).

Usage: python bench/bench_work.py [--quick] [--attempts N]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import median, table, write_section  # noqa: E402

from openfunctions.core import ToolExecutionContext, ToolRegistry, define_tool, new_id  # noqa: E402
from openfunctions.core.journal import JournalLog, read_records  # noqa: E402
from openfunctions.work import Authority, Catalog, GrantStore, WorkController  # noqa: E402

CATALOG = """version = 1
workspace = "ws"
[steps.noop_read]
kind = "command"
description = "no-op read"
argv = ["true"]
effect = "read"
[steps.noop_write]
kind = "command"
description = "no-op write"
argv = ["true"]
effect = "write"
[steps.check]
kind = "command"
description = "verifier"
argv = ["true"]
effect = "read"
verifier = true
"""


async def _noop(params, ctx):
    return {"exit_code": 0, "passed": True, "timed_out": False}


def _tools():
    return [
        define_tool(name="of_step.noop_read", description="noop", input_schema={"type": "object"}, handler=_noop,
                    capability={"effect": "read", "parallel_safe": True}),
        define_tool(name="of_step.noop_write", description="noop", input_schema={"type": "object"}, handler=_noop,
                    capability={"effect": "write"}),
        define_tool(name="of_step.check", description="verifier", input_schema={"type": "object"}, handler=_noop,
                    capability={"effect": "read", "parallel_safe": True}),
    ]


async def _setup(root: Path) -> tuple[Catalog, GrantStore]:
    (root / "ws").mkdir(parents=True, exist_ok=True)
    (root / "catalog.toml").write_text(CATALOG)
    catalog = Catalog.load(root / "catalog.toml")
    grants = GrantStore.in_data_dir(root / "data")
    await grants.issue(principal="bench", steps=["noop_read", "noop_write", "check"], paths=["**"],
                       ttl=_dt.timedelta(hours=1), issuer="bench")
    return catalog, grants


async def _open(root: Path, catalog: Catalog, grants: GrantStore, registry: ToolRegistry) -> WorkController:
    return await WorkController.open(root / "data" / "work", catalog=catalog, registry=registry,
                                     authority=Authority(grants, catalog), lease_ttl=60)


async def bench_steps(iters: int, repeats: int) -> list[list[object]]:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        catalog, grants = await _setup(root)
        registry = ToolRegistry(_tools())
        ctl = await _open(root, catalog, grants, registry)
        try:
            prv = await ctl.preview([{"step": "noop_read"}, {"step": "noop_write"}], principal="bench")
            await ctl.start(prv["previewId"], principal="bench")
            ctx = ToolExecutionContext(principal="bench")
            results: dict[str, list[float]] = {"bare": [], "append": [], "read": [], "write": []}
            log = await JournalLog.open(root / "fsync-probe.jsonl", kind="bench")
            for _ in range(repeats):
                t = time.perf_counter()
                for _ in range(iters):
                    await log.append("probe", {"n": 1})
                results["append"].append((time.perf_counter() - t) / iters * 1e6)
                t = time.perf_counter()
                for _ in range(iters):
                    await registry.execute_detailed("of_step.noop_read", {}, ctx)
                results["bare"].append((time.perf_counter() - t) / iters * 1e6)
                t = time.perf_counter()
                for _ in range(iters):
                    await ctl.run_step(principal="bench", index=0)
                results["read"].append((time.perf_counter() - t) / iters * 1e6)
                t = time.perf_counter()
                for _ in range(iters):
                    await ctl.run_step(principal="bench", index=1)
                results["write"].append((time.perf_counter() - t) / iters * 1e6)
        finally:
            await log.close()
            await ctl.close()
    bare = median(results["bare"])
    app = median(results["append"])
    rows = [
        ["bare registry.execute_detailed (peer)", f"{bare:.0f}", "1.0×", "0"],
        ["one fsynced JournalLog.append (reference)", f"{app:.0f}", f"{app / bare:.1f}×", "1"],
    ]
    for key, label, recs in (("read", "controller run_step, no-op read step", 1), ("write", "controller run_step, no-op write step", 3)):
        m = median(results[key])
        rows.append([label, f"{m:.0f}", f"{m / bare:.1f}×", str(recs)])
    return rows


async def _make_attempts(root: Path, n: int) -> tuple[Path, int]:
    """Run one real attempt to completion, then replay its records n-1 times with fresh ids."""
    catalog, grants = await _setup(root)
    registry = ToolRegistry(_tools())
    ctl = await _open(root, catalog, grants, registry)
    prv = await ctl.preview([{"step": "noop_write"}], principal="bench")
    await ctl.start(prv["previewId"], principal="bench")
    await ctl.run_step(principal="bench")
    await ctl.verify(principal="bench")
    await ctl.complete(principal="bench")
    await ctl.close()
    seg_dir = root / "data" / "work" / "attempts"
    template = [r for seg in sorted(seg_dir.glob("g*.jsonl")) for r in read_records(seg)
                if r.type not in ("lease_acquired", "recovered")]
    log = await JournalLog.open(seg_dir / "g9999999999.jsonl", kind="attempt")

    async def one(number: int) -> None:
        ids = {}
        for r in template:
            data = dict(r.data)
            for key, prefix in (("preview_id", "prv"), ("attempt_id", "att"), ("operation_id", "op")):
                if key in data:
                    data[key] = ids.setdefault((key, data[key]), new_id(prefix))
            if r.type == "attempt_started":
                data["number"] = number
            await log.append(r.type, data)

    sem = asyncio.Semaphore(256)

    async def bounded(i: int) -> None:
        async with sem:
            await one(i)

    await asyncio.gather(*(bounded(i) for i in range(2, n + 1)))
    await log.close()
    # the lease file names generation 1; move it past the synthetic segment's number
    lease = root / "data" / "work" / "lease.json"
    import json

    rec = json.loads(lease.read_text())
    rec["generation"] = 9999999999
    lease.write_text(json.dumps(rec))
    return seg_dir, len(template)


async def bench_recovery(n: int, repeats: int) -> tuple[list[list[object]], int]:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        seg_dir, per_attempt = await _make_attempts(root, n)
        catalog, grants = Catalog.load(root / "catalog.toml"), GrantStore.in_data_dir(root / "data")
        reads, opens = [], []
        records = 0
        for _ in range(repeats):
            t = time.perf_counter()
            records = sum(1 for seg in sorted(seg_dir.glob("g*.jsonl")) for _ in read_records(seg))
            reads.append(time.perf_counter() - t)
            t = time.perf_counter()
            ctl = await _open(root, catalog, grants, ToolRegistry(_tools()))
            opens.append(time.perf_counter() - t)
            assert ctl.state.attempt_count == n, ctl.state.attempt_count
            assert all(a.state == "completed" for a in ctl.state.attempts.values())
            await ctl.close()
        r, o = median(reads), median(opens)
        rows = [
            [f"read_records over {records:,} records (peer)", f"{r * 1000:.0f}", "1.0×"],
            [f"WorkController.open: recover {n:,} completed attempts", f"{o * 1000:.0f}", f"{o / r:.1f}×"],
        ]
        return rows, per_attempt


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations and 1,000 attempts")
    ap.add_argument("--attempts", type=int, default=None)
    ap.add_argument("--no-write", action="store_true", help="print only; do not update docs/PERFORMANCE.md")
    a = ap.parse_args()
    iters, repeats = (50, 3) if a.quick else (200, 5)
    n = a.attempts or (1000 if a.quick else 10_000)
    step_rows = await bench_steps(iters, repeats)
    rec_rows, per_attempt = await bench_recovery(n, 3)
    body = (
        f"Per step ({iters} calls × {repeats} repeats, median of the per-call means; every journal record fsynced, "
        "lease fenced, grant checked):\n\n"
        + table(["path", "median µs / step", "vs peer", "fsynced records"], step_rows)
        + f"\n\nRecovery of a data directory with {n:,} completed attempts ({per_attempt} records each; "
        "median of 3 opens):\n\n"
        + table(["path", "median ms", "vs peer"], rec_rows)
        + "\n\nThe per-step cost is dominated by the fsync of each journal record (the peer writes none); "
        "recovery replays every record once and keeps every attempt's summary in memory."
    )
    print(body)
    if not a.no_write:
        cmd = "python bench/bench_work.py" + (" --quick" if a.quick else "") + (f" --attempts {a.attempts}" if a.attempts else "")
        write_section("work", "Work controller: per-step overhead and recovery (bench/bench_work.py)", body, cmd)


if __name__ == "__main__":
    asyncio.run(main())
