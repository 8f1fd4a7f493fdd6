"""Per-call cost of the executor on a no-op tool.

Compares, in one run: the handler called directly; ``execute_detailed``
(receipts on, journal off); ``execute_detailed`` with an in-memory sink; and
the ``mcp`` SDK's own ``MCPServer`` with the same tool driven in-process by
``mcp.Client`` (which adds the protocol, so it is context, not a like-for-like
peer). Each figure is the median over batches of the per-call mean.

Usage: python bench/bench_core.py [--quick] [--no-write]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import median, table, write_section  # noqa: E402

from openfunctions.core import MemoryJournalSink, ToolRegistry, define_tool  # noqa: E402


async def noop(params, ctx):
    return {"ok": True}


TOOL = define_tool(
    name="noop", description="does nothing",
    input_schema={"type": "object", "properties": {"x": {"type": "integer"}}},
    handler=noop,
)


async def per_call_us(fn, batches: int, per_batch: int) -> float:
    for _ in range(per_batch):  # warm-up
        await fn()
    samples = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(per_batch):
            await fn()
        samples.append((time.perf_counter() - t0) / per_batch * 1e6)
    return median(samples)


async def main(quick: bool, write: bool) -> None:
    batches, per_batch = (7, 300) if quick else (15, 2000)
    params = {"x": 1}
    reg = ToolRegistry([TOOL])
    reg_sink = ToolRegistry([TOOL], sink=MemoryJournalSink())

    async def direct():
        await noop(params, None)

    async def executor():
        await reg.execute_detailed("noop", params)

    async def executor_sink():
        await reg_sink.execute_detailed("noop", params)
        reg_sink.executor.sink.receipts.clear()
        reg_sink.executor.sink.starts.clear()

    results = {
        "handler called directly": await per_call_us(direct, batches, per_batch),
        "execute_detailed (receipts on, journal off)": await per_call_us(executor, batches, per_batch),
        "execute_detailed + in-memory journal sink": await per_call_us(executor_sink, batches, per_batch),
    }

    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    sdk = MCPServer("bench")

    @sdk.tool()
    async def noop_sdk(x: int = 0) -> dict:
        return {"ok": True}

    mcp_batches, mcp_per = (5, 100) if quick else (9, 400)
    async with Client(sdk) as client:
        async def via_sdk():
            await client.call_tool("noop_sdk", params)

        results["SDK MCPServer via in-process mcp.Client"] = await per_call_us(via_sdk, mcp_batches, mcp_per)

    base = results["handler called directly"]
    ex = results["execute_detailed (receipts on, journal off)"]
    rows = [[name, f"{us:.1f}", f"{us - base:+.1f}"] for name, us in results.items()]
    body = table(["path", "median µs / call", "added over direct µs"], rows)
    body += (
        f"\n\nExecutor overhead over a direct handler call: **{ex - base:.1f} µs** at the median "
        f"(target ≤ 50 µs). The SDK's `MCPServer` through `mcp.Client` costs "
        f"{results['SDK MCPServer via in-process mcp.Client'] / ex:.1f}× one `execute_detailed` (it includes the protocol)."
    )
    print(body)
    if write:
        write_section("core", "Executor per-call cost (bench/bench_core.py)", body, "python bench/bench_core.py" + (" --quick" if quick else ""))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/PERFORMANCE.md alone")
    a = ap.parse_args()
    anyio.run(main, a.quick, not a.no_write)
