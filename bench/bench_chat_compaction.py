"""How long a chat server's conversation-table compaction blocks the event loop.

    .venv/bin/python bench/bench_chat_compaction.py [--issues 1500] [--limit 64]

A chat agent with memory on (so its table of issued conversations is a durable
core journal in the data dir) issues ``--issues`` conversations one after
another through :meth:`ChatAgent.open_conversation` (what ``POST /chat``
without a conversation id does). Past ``limit`` each issue also evicts one,
so the file grows by two records per issue and is compacted every
``max(4 × limit, 256)`` records (the core record stream's compaction):
``JournalLog.rotate`` (a rename and a new header, three fsyncs, *on the event
loop*), one ``snapshot`` and a ``compacted`` record appended (writer thread),
then the old segments unlinked and the directory fsynced (on the event loop).

Meanwhile a ticker task sleeps 1 ms at a time and records how late each wake-up
is: the loop's stall. For every issue the largest stall seen while it ran is
kept; issues are split into those that compacted (the file shrank) and the
others, the peer measured in the same run. Prints the medians and maxima of
both and their ratio. Nothing is written to docs (the figure is quoted in
docs/CHAT.md).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from openfunctions.adapters import ScriptedAdapter  # noqa: E402
from openfunctions.chat import open_chat_agent  # noqa: E402

TICK_S = 0.001


async def measure(data_dir: Path, issues: int, limit: int) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per issue: (largest loop stall, wall time), split into compacting and ordinary issues (ms)."""
    stalls: list[tuple[float, float]] = []  # (wake-up time, how late)
    done = False

    async def ticker() -> None:
        while not done:
            t = time.perf_counter()
            await anyio.sleep(TICK_S)
            now = time.perf_counter()
            stalls.append((now, now - t - TICK_S))

    comp_stall: list[float] = []
    comp_wall: list[float] = []
    plain_stall: list[float] = []
    plain_wall: list[float] = []
    async with await open_chat_agent(adapter=ScriptedAdapter([]), data_dir=data_dir, max_conversations=limit,
                                       name="bench") as agent:
        table = data_dir / "chat" / "bench.conversations.journal"
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            await anyio.sleep(0.05)
            for _ in range(issues):
                before = table.stat().st_size if table.exists() else 0
                first = len(stalls)
                t0 = time.perf_counter()
                await agent.open_conversation()
                wall = time.perf_counter() - t0
                await anyio.sleep(2 * TICK_S)  # let the ticker's wake-up that covers the end of this issue land
                worst = max((late for _, late in stalls[first:]), default=0.0) * 1000
                if table.stat().st_size < before:
                    comp_stall.append(worst)
                    comp_wall.append(wall * 1000)
                else:
                    plain_stall.append(worst)
                    plain_wall.append(wall * 1000)
            done = True
    return comp_stall, comp_wall, plain_stall, plain_wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--issues", type=int, default=1500, help="conversations issued (default: %(default)s)")
    ap.add_argument("--limit", type=int, default=64, help="max_conversations (default: %(default)s)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        comp_stall, comp_wall, plain_stall, plain_wall = anyio.run(measure, Path(d), args.issues, args.limit)
    if not comp_stall:
        print("no compaction happened: raise --issues")
        return

    def line(name: str, stall: list[float], wall: list[float]) -> str:
        return (f"{name:<22} n={len(stall):>5}  loop stall median {statistics.median(stall):7.2f} ms  "
                f"max {max(stall):7.2f} ms  |  issue wall median {statistics.median(wall):7.2f} ms")

    print(line("compacting issues", comp_stall, comp_wall))
    print(line("ordinary issues (peer)", plain_stall, plain_wall))
    print(f"ratio of median stalls (compacting / ordinary): {statistics.median(comp_stall) / max(statistics.median(plain_stall), 1e-6):.1f}x")


if __name__ == "__main__":
    main()
