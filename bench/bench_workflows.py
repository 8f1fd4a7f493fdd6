"""Workflow benchmark: a 10-step workflow's cost per step against calling the same tools directly.

The tools are 10 no-op async tools (``{"n": n + 1}``, capability effect
``write``, so a durable run journals a start record for each: the costly
case), the worst case for overhead: nothing in the step hides it.

Pairs, each measured in the same run, interleaved, median of repeats:

- **journal off**: ``pipe(10 tool steps).run(x)`` (in memory) vs 10 direct
  ``registry.execute_detailed`` calls, neither journaling anything.
- **journal on**: a durable run (``WorkflowRuns.run``: a new run file, a
  start record per step, every step's result fsynced before the next step
  starts, ``run_finished`` fsynced) on a registry whose executor journals to
  an ``ExecutionJournal`` (what the server runs by default) vs 10 direct
  calls on that same registry. Both sides fsync the executor's start record
  and receipt per call; the workflow adds its own records.
- also shown: the durable run on a registry without an execution journal,
  against the same journal-on peer and against the journal-off peer.

Usage: python bench/bench_workflows.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import median, table, write_section  # noqa: E402

from openfunctions.core import ToolRegistry, define_tool  # noqa: E402
from openfunctions.core.journal import ExecutionJournal  # noqa: E402
from openfunctions.workflows import WorkflowRuns, pipe, tool_step  # noqa: E402

STEPS = 10


async def _inc(params, ctx):
    return {"n": params["n"] + 1}


def _registry(effect: str, journal=None) -> ToolRegistry:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    cap = {"effect": effect, "parallel_safe": effect == "read"}
    return ToolRegistry(
        [define_tool(name=f"step{i}", description="no-op", input_schema=schema, handler=_inc, capability=cap)
         for i in range(STEPS)],
        journal=journal,
    )


async def _direct(reg: ToolRegistry) -> None:
    value = {"n": 0}
    for i in range(STEPS):
        value = (await reg.execute_detailed(f"step{i}", value)).value
    assert value == {"n": STEPS}


async def _pair(a, b, n: int) -> tuple[float, float]:
    """Median µs per step of ``a`` and ``b``, alternating one run of each (the machine is shared:
    alternating puts both under the same load)."""
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(n):
        t0 = time.perf_counter()
        await a()
        t1 = time.perf_counter()
        await b()
        t2 = time.perf_counter()
        ta.append((t1 - t0) / STEPS * 1e6)
        tb.append((t2 - t1) / STEPS * 1e6)
    return median(ta), median(tb)


async def bench(n_off: int, n_on: int) -> list[list[object]]:
    wf = pipe(*(tool_step(f"step{i}") for i in range(STEPS)), name="bench10")
    rows: list[list[object]] = []
    for effect in ("write", "read"):
        with tempfile.TemporaryDirectory() as d:
            root = Path(d)
            journal = await ExecutionJournal.open(root / "execution.jsonl", rotate_over=None)
            reg_off, reg_on = _registry(effect), _registry(effect, journal)
            runs_on = WorkflowRuns(root / "wf-on", workflows=[wf], registry=reg_on)
            runs_plain = WorkflowRuns(root / "wf-plain", workflows=[wf], registry=reg_off)

            async def wf_off() -> None:
                assert (await wf.run({"n": 0}, registry=reg_off)) == {"n": STEPS}

            async def wf_on() -> None:
                assert (await runs_on.run(wf, {"n": 0})).result == {"n": STEPS}

            async def wf_plain() -> None:
                assert (await runs_plain.run(wf, {"n": 0})).result == {"n": STEPS}

            try:
                for _ in range(3):  # warm up
                    await _direct(reg_off), await wf_off(), await _direct(reg_on), await wf_on(), await wf_plain()
                d_off, w_off = await _pair(lambda: _direct(reg_off), wf_off, n_off)
                d_on, w_on = await _pair(lambda: _direct(reg_on), wf_on, n_on)
                d_off2, w_plain = await _pair(lambda: _direct(reg_off), wf_plain, n_on)
            finally:
                await journal.close()
        rows += [
            [f"{effect} tools: 10 direct calls, no journal (peer)", f"{d_off:.0f}", "1.00×", "", "0"],
            [f"{effect} tools: pipe of 10 tool steps, in memory", f"{w_off:.0f}", f"{w_off / d_off:.2f}×", "≤ 1.1×", "0"],
            [f"{effect} tools: 10 direct calls, execution journal (peer)", f"{d_on:.0f}", "1.00×", "", "20"],
            [f"{effect} tools: durable run, execution journal + run journal", f"{w_on:.0f}", f"{w_on / d_on:.2f}×", "≤ 1.5×",
             f"20 + {_run_fsyncs(effect)}"],
            [f"{effect} tools: durable run, run journal only (vs the no-journal peer, {d_off2:.0f} µs)", f"{w_plain:.0f}",
             f"{w_plain / d_off2:.2f}×", "", _run_fsyncs(effect)],
        ]
    return rows


def _run_fsyncs(effect: str) -> str:
    # new run file (temp file + directory) 2; a step start per write step (with the previous
    # outcome) 10; the first read's... nothing for reads; run_finished 1
    return "13" if effect == "write" else "3"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs (a smoke test; numbers are noisier)")
    ap.add_argument("--no-write", action="store_true", help="print the table, do not touch docs/PERFORMANCE.md")
    args = ap.parse_args()
    n_off, n_on = (20, 5) if args.quick else (300, 40)
    rows = anyio.run(bench, n_off, n_on)
    body = table(["path (10 steps)", "median µs / step", "vs its peer", "target", "fsyncs / run"], rows)
    body += (
        f"\n\n{STEPS} no-op tools in sequence (capability effect `write`, then `read`); each row pair alternates one run "
        f"of each side ({n_off} pairs without a journal, {n_on} with), per step = run time / {STEPS}. A durable run "
        "creates its run file (temp file + directory fsync) and fsyncs `run_finished`; a write step fsyncs its start "
        "record together with the previous step's outcome; read steps' results ride along with the next fsync. That "
        "per-run cost is inside these figures, spread over the 10 steps. The execution-journal peer fsyncs a start "
        "record and a receipt per call (what the server does by default)."
    )
    print(body)
    if not args.no_write:
        write_section("workflows", "Workflows: a 10-step workflow per step vs direct calls (bench/bench_workflows.py)", body,
                      "python bench/bench_workflows.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
