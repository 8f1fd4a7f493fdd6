"""Where one journaled call's CPU goes: the executor's stages, in process, with the real execution journal.

Runs ``execute_detailed`` for a tool (default ``of_hash_text``, the load
test's tool) against an ``ExecutionJournal`` in a temporary directory (the
same disk the servers' journals use), and prints:

- unprofiled wall and CPU time per call (median of 5 runs);
- each stage's cumulative cost per call under cProfile, timed with the
  event-loop thread's own CPU clock (``time.thread_time``), so neither the
  fsync wait nor the journal writer thread is counted, only what the loop pays.
  cProfile inflates small Python calls: compare stages with each other and
  before/after, not with the unprofiled total.

    python bench/profile_call_path.py [--tool of_hash_text|noop|noop_write] [--calls 2000] [--no-journal]

Prints only; nothing is written to docs/ (the figures are quoted in the
session notes with the command that produced them).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from openfunctions.core import ToolRegistry, define_tool
from openfunctions.core.journal import ExecutionJournal
from openfunctions.servers._example_tools import example_tools

STAGES = ["execute_detailed", "_capture", "_validate", "_resolve_policy", "_admit", "_persist_start", "_invoke",
          "_normalize", "_check_output", "_settle", "_persist_receipt", "_receipt"]


async def _noop(params: dict[str, Any], ctx: Any) -> str:
    return "ok"


def _registry() -> ToolRegistry:
    tools = [t for t in example_tools() if t.name == "of_hash_text"]
    tools.append(define_tool(name="noop", description="n", input_schema={"type": "object", "properties": {}},
                             handler=_noop, capability={"effect": "read", "parallel_safe": True, "idempotent": True}))
    tools.append(define_tool(name="noop_write", description="n", input_schema={"type": "object", "properties": {}},
                             handler=_noop, capability={"effect": "write"}))
    return ToolRegistry(tools)


async def _run(tool: str, calls: int, journal: bool, prof: cProfile.Profile | None) -> tuple[float, float]:
    reg = _registry()
    params = {"text": "client 1 call 2"} if tool == "of_hash_text" else {}
    with tempfile.TemporaryDirectory() as tmp:
        j = await ExecutionJournal.open(Path(tmp) / "bench.journal") if journal else None
        if j is not None:
            reg.executor.add_sink(j, first=True)
        ex, t = reg.executor, reg.get(tool)
        for _ in range(50):
            await ex.execute_detailed(t, params)
        if prof is not None:
            prof.enable()
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(calls):
            r = await ex.execute_detailed(t, params)
            if r.receipt.outcome != "succeeded":
                raise RuntimeError(r.receipt)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if prof is not None:
            prof.disable()
        if j is not None:
            await j.close()
    return wall / calls * 1e6, cpu / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", default="of_hash_text", choices=["of_hash_text", "noop", "noop_write"])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--no-journal", action="store_true")
    args = ap.parse_args(argv)
    journal = not args.no_journal
    runs = [asyncio.run(_run(args.tool, args.calls // 2, journal, None)) for _ in range(5)]
    wall = statistics.median(w for w, _ in runs)
    cpu = statistics.median(c for _, c in runs)
    print(f"{args.tool}, journal {'on' if journal else 'off'}: unprofiled wall {wall:.0f} us/call, "
          f"process CPU {cpu:.0f} us/call (median of 5 x {args.calls // 2})")
    prof = cProfile.Profile(time.thread_time)
    asyncio.run(_run(args.tool, args.calls, journal, prof))
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    print(f"stage costs, cProfile on the loop thread's CPU clock, cumulative us per call ({args.calls} calls):")
    for stage in STAGES:
        total = sum(v[3] for (file, _line, func), v in stats.items() if func == stage and file.endswith("executor.py"))
        print(f"  {stage:18s} {total / args.calls * 1e6:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
