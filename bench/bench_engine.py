"""Engine overhead per round beyond the model and the tools, against the same calls made in a hand loop.

Both sides play the same scripted replies (R-1 rounds that each ask for one no-op tool call, then a text
answer) and run the same tool through a registry whose executor journals to a file (journal on: a start
and a receipt per call for a write, a receipt for a read). The peer is a minimal loop: call the model,
execute the call, append the result. The engine side is a :class:`~openfunctions.engine.Session` on
disk: its records (the round with its calls' receipt ids, the results) in the same journal file as its
calls' starts and receipts, events encoded as JSON lines to /dev/null, limits, steering and compaction
checks. Overhead per round = the slope of (engine - peer) between the short and the long run; fixed =
what is left per run (the prompt and end records; opening each side's journal file is not timed).

Usage: python bench/bench_engine.py [--short 2] [--rounds 16] [--runs 30] [--no-write]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import median, table, write_section  # noqa: E402

from openfunctions.adapters import Message  # noqa: E402
from openfunctions.core import Capability, ToolRegistry, define_tool  # noqa: E402
from openfunctions.core.journal import ExecutionJournal  # noqa: E402
from openfunctions.engine import ScriptFileAdapter, Session, SessionConfig  # noqa: E402
from openfunctions.engine._protocol import event_writer  # noqa: E402


async def _noop(p, c):
    return {"ok": True}


WRITE = define_tool(name="noop", description="does nothing (a write to the executor)", handler=_noop)
READ = define_tool(name="noop_read", description="does nothing (a reviewed read)", handler=_noop,
                   capability=Capability(effect="read", parallel_safe=True))


def script(tool: str, rounds: int) -> list:
    return [{"tool": tool, "arguments": {}}] * (rounds - 1) + ["done"]


async def peer(data: Path, tool: str, rounds: int) -> float:
    # a fresh journal file per run, as each session has its own (its opening is not timed, on either side)
    journal = await ExecutionJournal.open(data / f"peer-{os.urandom(8).hex()}.journal")
    # one record first, as a session writes its first record when it opens: a new file's first fsync costs more
    await journal.log.append("bench", {})
    registry = ToolRegistry([WRITE, READ], sink=journal)
    adapter = ScriptFileAdapter(script(tool, rounds))
    tools = registry.list()
    t0 = time.perf_counter()
    messages = [Message.system("x"), Message.user("go")]
    while True:
        reply = await adapter.chat(messages, tools)
        if not reply.tool_calls:
            break
        messages.append(reply.as_message())
        for call in reply.tool_calls:
            d = await registry.execute_detailed(call.name, call.arguments)
            messages.append(Message.tool_result(call, d.result.content[0]["text"], is_error=d.result.is_error))
    dt = time.perf_counter() - t0
    await journal.close()
    return dt


async def engine(data: Path, tool: str, rounds: int, emit) -> float:
    cfg = SessionConfig(adapter=ScriptFileAdapter(script(tool, rounds)), data_dir=data, tools=[WRITE, READ])
    session = await Session.open(cfg, emit=emit)  # not timed: creating the file, as the peer's
    t0 = time.perf_counter()
    async with session:
        session.prompt("go")
        session.close_when_idle()
        await session.work()
    dt = time.perf_counter() - t0
    assert session.state.last_end["state"] == "finished" and session.state.rounds_total == rounds, session.state.last_end
    return dt


async def main_async(short: int, long: int, runs_n: int) -> dict[tuple[str, str, int], float]:
    devnull = open(os.devnull, "w")  # noqa: SIM115 - closed below
    emit = event_writer(devnull)
    samples: dict[tuple[str, str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(dir=Path(__file__).resolve().parent.parent) as tmp:  # the disk, not tmpfs
        for _ in range(5):  # warm up
            await peer(Path(tmp), "noop", long)
            await engine(Path(tmp), "noop", long, emit)
        for _ in range(runs_n):  # interleaved: the machine's load hits every variant alike
            for tool in ("noop", "noop_read"):
                for r in (short, long):
                    samples.setdefault(("peer", tool, r), []).append(await peer(Path(tmp), tool, r))
                    samples.setdefault(("engine", tool, r), []).append(await engine(Path(tmp), tool, r, emit))
    devnull.close()
    return {k: median(v) for k, v in samples.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--short", type=int, default=2, help="rounds of the short run (default 2)")
    ap.add_argument("--rounds", type=int, default=16, help="rounds of the long run (default 16)")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    s, r = args.short, args.rounds
    m = anyio.run(main_async, s, r, args.runs)
    rows = []
    for tool, label in (("noop", "a write tool (executor start + receipt)"), ("noop_read", "a read tool (receipt)")):
        extra_long = m[("engine", tool, r)] - m[("peer", tool, r)]
        extra_short = m[("engine", tool, s)] - m[("peer", tool, s)]
        per_round = (extra_long - extra_short) / (r - s)
        fixed = extra_short - per_round * s
        rows.append([label, f"{m[('engine', tool, r)] * 1e3:.2f} ms", f"{m[('peer', tool, r)] * 1e3:.2f} ms",
                     f"{m[('engine', tool, r)] / m[('peer', tool, r)]:.2f}x", f"{per_round * 1e6:.0f} µs",
                     f"{fixed * 1e6:.0f} µs"])
    body = (
        f"Runs of {s} and {r} rounds (each round but the last asks for one no-op tool call; the last answers in "
        f"text), scripted model; medians of {args.runs} interleaved runs each. Peer: the same model replies and "
        "the same tool calls through an executor journaling to a file, in a hand-written loop. Engine: a session "
        "on disk (its records and its calls' starts and receipts in one journal file), events encoded to "
        f"/dev/null. Overhead per round = the slope of (engine - peer) between {s} and {r} rounds; fixed = what is left per run (the prompt "
        "and end records, two waited fsyncs; creating each side's journal file is not timed).\n\n"
        + table([f"tool ({r} rounds)", "engine per run", "peer per run", "ratio", "overhead per round",
                 "fixed per run"], rows)
        + "\n\nPer round the engine adds its round record (the calls' intent with their receipt ids) and result "
        "records, the events, and the fold of each record into the session's state. It waits for no fsync of "
        "its own: the intent shares the file with the executor's start record, whose fsync the call waits for "
        "anyway. Its queued records are written in a group of their own, though, while the model is asked for "
        "the next round; the scripted model answers at once, so here that write still lands in the round (with "
        "a real model it overlaps the model's answer). Target: at most 1 ms per round with the journal on. The "
        "overhead columns are medians of differences on a shared machine and disk: read them to about +-0.3 ms."
    )
    print(body)
    if not args.no_write:
        write_section("engine", "Engine: overhead per round beyond the model and tools (bench/bench_engine.py)",
                      body, f"python bench/bench_engine.py --short {s} --rounds {r} --runs {args.runs}")


if __name__ == "__main__":
    main()
