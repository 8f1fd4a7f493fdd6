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
    python bench/profile_call_path.py --http [--calls 2000] [--no-journal]
    python bench/profile_call_path.py --ordered [--calls 800]

``--ordered`` compares, in one run, 16 concurrent callers (effectful
``noop_write``, then the read ``of_hash_text``) with the file journal releasing
each call's reservation once its receipt is queued (the default)
and once it is durable (docs/formats/receipt.md).

``--threads`` splits the journal's CPU per call by thread (from
``/proc/self/task``): the event-loop thread and the other threads (the
journal writer is the only one),
user and system time, journal on and off, 1 and 16 concurrent callers; and
times the journal's own pieces on the loop thread (``time.thread_time_ns``
around ``Receipt.canonical_json`` (the receipt's text, once per call; the
execution journal appends it pre-encoded), ``JournalLog._encode`` (start
records of effectful tools), ``GroupWriter.enqueue``,
``_Batch.resolve``), so the rest of the loop thread's extra CPU is the
wake-up (the writer's ``call_soon_threadsafe``, the loop's ``epoll_wait``).
``cpu`` is the scheduler's exact run time per thread; ``user``/``sys`` split it
by tick samples (see ``_thread_cpu``).

``--http`` instead drives one whole 2026-07-28 ``tools/call`` POST through the
real ASGI app (``create_http_app``: the request guard, the direct
``tools/call`` path or, with it off, the SDK's streamable-HTTP app), in
process without sockets, fast path on and off alternately: per-request wall
and process CPU (the journal writer thread included), then a cProfile of the
fast path.

Prints only; nothing is written to docs/ (the figures are quoted in the
session notes with the command that produced them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
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


@contextlib.asynccontextmanager
async def _warm_executor(tool: str, journal: bool) -> AsyncIterator[tuple[Any, Any, dict[str, Any]]]:
    """(executor, tool, params) with the real journal in a temporary directory (or none), after 50 warm-up calls."""
    reg = _registry()
    params = {"text": "client 1 call 2"} if tool == "of_hash_text" else {}
    with tempfile.TemporaryDirectory() as tmp:
        j = await ExecutionJournal.open(Path(tmp) / "bench.journal") if journal else None
        if j is not None:
            reg.executor.add_sink(j, first=True)
        ex, t = reg.executor, reg.get(tool)
        for _ in range(50):
            await ex.execute_detailed(t, params)
        try:
            yield ex, t, params
        finally:
            if j is not None:
                await j.close()


async def _run(tool: str, calls: int, journal: bool, prof: cProfile.Profile | None) -> tuple[float, float]:
    async with _warm_executor(tool, journal) as (ex, t, params):
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
    return wall / calls * 1e6, cpu / calls * 1e6


_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
         "io.modelcontextprotocol/clientInfo": {"name": "profile", "version": "0"},
         "io.modelcontextprotocol/clientCapabilities": {}}


async def _http_request(app: Any, i: int) -> int:
    """One 2026-07-28 ``tools/call`` POST of ``of_hash_text`` through the ASGI app; its HTTP status."""
    body = json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
        "name": "of_hash_text", "arguments": {"text": f"call {i}"}, "_meta": _META}}).encode()
    headers = [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
               (b"accept", b"application/json, text/event-stream"), (b"mcp-protocol-version", b"2026-07-28"),
               (b"mcp-method", b"tools/call"), (b"mcp-name", b"of_hash_text"), (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/mcp", "raw_path": b"/mcp", "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 5555), "server": ("127.0.0.1", 8000)}
    delivered = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # no disconnect
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def _run_http(calls: int, journal: bool, fast: bool, prof: cProfile.Profile | None) -> tuple[float, float]:
    """Per-request wall and process CPU (us) of the real ASGI app (guard, fast path or the SDK's app), no sockets."""
    from openfunctions.servers import create_http_app, create_mcp_server

    with tempfile.TemporaryDirectory() as tmp:
        server = create_mcp_server(ToolRegistry([t for t in example_tools() if t.name == "of_hash_text"]), name="p",
                                   version="0", journal_dir=Path(tmp) if journal else None)
        app = create_http_app(server, port=8000, fast_path=fast)
        inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        lifespan = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}}, inbox.get, outbox.put))
        await inbox.put({"type": "lifespan.startup"})
        await outbox.get()
        async with server:
            for i in range(100):
                if await _http_request(app, i) != 200:
                    raise RuntimeError("the warm-up call failed")
            if prof is not None:
                prof.enable()
            c0, w0 = time.process_time(), time.perf_counter()
            for i in range(calls):
                await _http_request(app, i)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            if prof is not None:
                prof.disable()
        await inbox.put({"type": "lifespan.shutdown"})
        await outbox.get()
        await lifespan
    return wall / calls * 1e6, cpu / calls * 1e6


def http_main(calls: int, journal: bool) -> int:
    """``--http``: the whole HTTP request (ASGI, no sockets), fast path on vs off, alternating, medians of 5 each."""
    on, off = [], []
    for _ in range(5):
        on.append(asyncio.run(_run_http(calls // 2, journal, True, None)))
        off.append(asyncio.run(_run_http(calls // 2, journal, False, None)))
    for label, runs in (("fast path on ", on), ("fast path off", off)):
        print(f"HTTP of_hash_text, journal {'on' if journal else 'off'}, {label}: wall "
              f"{statistics.median(w for w, _ in runs):.0f} us/request, process CPU "
              f"{statistics.median(c for _, c in runs):.0f} us/request (median of 5 x {calls // 2})")
    prof = cProfile.Profile(time.thread_time)
    asyncio.run(_run_http(calls, journal, True, prof))
    print(f"fast path on, cProfile on the loop thread's CPU clock, top cumulative ({calls} requests):")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    return 0


def _thread_cpu() -> dict[str, tuple[str, float, float, float]]:
    """Per thread of this process: (name, user s, system s, CPU s); ``_report.thread_cpu`` says which are exact."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import thread_cpu

    return thread_cpu()


_PIECES = (("core._receipts", "Receipt", "canonical_json"), ("core.journal._log", "JournalLog", "_encode"),
           ("core.journal._writer", "GroupWriter", "enqueue"), ("core.journal._writer", "_Batch", "resolve"))


def _timed_pieces(acc: dict[str, int]) -> list[tuple[type, str, Any]]:
    """Wrap the journal's loop-thread pieces to add their thread CPU (ns) into ``acc``; returns what to restore."""
    import importlib

    restore = []
    for module, cls_name, attr in _PIECES:
        mod = importlib.import_module("openfunctions." + module)
        cls = getattr(mod, cls_name)
        raw = cls.__dict__[attr]
        func = raw.__func__ if isinstance(raw, staticmethod) else raw
        label = f"{cls_name}.{attr}"

        def timed(*a: Any, _f: Any = func, _label: str = label, **k: Any) -> Any:
            t0 = time.thread_time_ns()
            try:
                return _f(*a, **k)
            finally:
                acc[_label] = acc.get(_label, 0) + time.thread_time_ns() - t0

        setattr(cls, attr, staticmethod(timed) if isinstance(raw, staticmethod) else timed)
        restore.append((cls, attr, raw))
    return restore


async def _run_threads(tool: str, calls: int, journal: bool, concurrency: int) -> dict[str, float]:
    import threading

    acc: dict[str, int] = {}
    async with _warm_executor(tool, journal) as (ex, t, params):
        restore = _timed_pieces(acc) if journal else []
        try:
            before, w0 = _thread_cpu(), time.perf_counter()

            async def caller(n: int) -> None:
                for _ in range(n):
                    await ex.execute_detailed(t, params)

            await asyncio.gather(*(caller(calls // concurrency) for _ in range(concurrency)))
            wall, after = time.perf_counter() - w0, _thread_cpu()
        finally:
            for cls, attr, raw in restore:
                setattr(cls, attr, raw)
    main_tid = str(threading.get_native_id())
    out = {"wall": wall / calls * 1e6}
    for tid, (_name, user, system, cpu) in after.items():
        if tid not in before:
            continue
        # Python 3.11 does not name OS threads: every other thread here is the journal writer.
        role = "loop" if tid == main_tid else "writer"
        out[f"{role} cpu"] = out.get(f"{role} cpu", 0.0) + (cpu - before[tid][3]) / calls * 1e6
        out[f"{role} user"] = out.get(f"{role} user", 0.0) + (user - before[tid][1]) / calls * 1e6
        out[f"{role} sys"] = out.get(f"{role} sys", 0.0) + (system - before[tid][2]) / calls * 1e6
    out.update({k: v / calls / 1000 for k, v in acc.items()})
    return out


def threads_main(tool: str, calls: int) -> int:
    """``--threads``: CPU per call by thread, journal on vs off, 1 and 16 callers (medians of 3 runs)."""
    for concurrency in (1, 16):
        for journal in (False, True):
            runs = [asyncio.run(_run_threads(tool, calls, journal, concurrency)) for _ in range(3)]
            keys = sorted({k for r in runs for k in r})
            cells = {k: statistics.median(r.get(k, 0.0) for r in runs) for k in keys}
            head = f"{tool}, {concurrency:2d} caller(s), journal {'on ' if journal else 'off'}:"
            print(head, ", ".join(f"{k} {cells[k]:.0f}" for k in ("wall", "loop cpu", "loop user", "loop sys",
                                                                      "writer cpu", "writer user", "writer sys")
                                   if k in cells), "us/call")
            for label in (f"{c}.{a}" for _m, c, a in _PIECES):
                if label in cells:
                    print(f"    loop thread in {label}: {cells[label]:.1f} us/call")
    return 0


def ordered_main(calls: int, rounds: int = 3) -> int:
    """``--ordered``: 16 concurrent callers (``noop_write``, then ``of_hash_text``) with the file journal
    releasing a call's reservation once its receipt is queued (``ExecutionJournal.ordered_receipts``, the
    default) vs once it is durable (the flag off for the run), rounds interleaved; medians and the paired ratio."""
    for tool in ("noop_write", "of_hash_text"):
        res: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        try:
            for _ in range(rounds):
                for flag in (False, True):
                    ExecutionJournal.ordered_receipts = flag
                    res[flag].append(asyncio.run(_run_threads(tool, calls, True, 16)))
        finally:
            ExecutionJournal.ordered_receipts = True
        for flag in (True, False):
            rs = res[flag]

            def med(key: str, rs: list[dict[str, float]] = rs) -> float:
                return statistics.median(r.get(key, 0.0) for r in rs)

            name = "released when queued (default)" if flag else "released when durable"
            walls = ", ".join(f"{r['wall']:.0f}" for r in rs)
            print(f"{tool}, 16 callers, {name:30s}: wall {med('wall'):.0f} us/call (rounds {walls}), "
                  f"loop {med('loop user') + med('loop sys'):.0f}, writer {med('writer user') + med('writer sys'):.0f} "
                  "us/call CPU")
        paired = statistics.median(b["wall"] / a["wall"] for a, b in zip(res[True], res[False], strict=True))
        print(f"{tool}: speed, queued vs durable (median of per-round wall ratios): {paired:.2f}x")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", default="of_hash_text", choices=["of_hash_text", "noop", "noop_write"])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--no-journal", action="store_true")
    ap.add_argument("--http", action="store_true",
                    help="profile the whole HTTP request through the ASGI app (of_hash_text), fast path on vs off")
    ap.add_argument("--threads", action="store_true",
                    help="CPU per call by thread (loop, journal writer), journal on/off, 1 and 16 callers")
    ap.add_argument("--ordered", action="store_true",
                    help="16 concurrent callers (noop_write, of_hash_text): reservation released when the receipt is "
                         "queued vs durable")
    args = ap.parse_args(argv)
    journal = not args.no_journal
    if args.ordered:
        return ordered_main(args.calls if args.calls != 2000 else 800)
    if args.threads:
        return threads_main(args.tool, args.calls)
    if args.http:
        return http_main(args.calls, journal)
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
