"""What a 2026-07-28 client's ``sampling`` capability costs a call that never asks for the client's model.

A call from a client that declares ``sampling`` runs in a task of its own so
it can be suspended while the client answers an ``InputRequiredResult``
(servers/_input_required.py). This measures that against its peer in the same
run: the same server (a stdio subprocess, the direct ``tools/call`` path),
the same trivial read tool, sequential calls whose 2026-07-28 envelope
declares no capability vs ``{"sampling": {}}``, interleaved in batches.
Prints the median per-call latency of each and the ratio.

Usage: python bench/bench_input_required.py [--batches 10] [--calls 300] [--no-journal]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TOOLS = '''
from openfunctions.core import define_tool
tools = [define_tool(name="echo", description="Echo", input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
                     handler=lambda p, c: {"q": p["q"]}, capability={"effect": "read", "parallel_safe": True})]
'''


def _meta(sampling: bool) -> dict[str, object]:
    return {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"sampling": {}} if sampling else {},
            "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"}}


def _batch(proc: subprocess.Popen[str], sampling: bool, n: int) -> float:
    assert proc.stdin is not None and proc.stdout is not None
    times = []
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "echo", "arguments": {"q": "x"}, "_meta": _meta(sampling)}}) + "\n"
    for _ in range(n):
        t = time.perf_counter()
        proc.stdin.write(line)
        proc.stdin.flush()
        reply = proc.stdout.readline()
        times.append(time.perf_counter() - t)
        if '"result"' not in reply:
            raise SystemExit(f"unexpected reply: {reply[:300]}")
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--no-journal", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "bench_tools.py").write_text(TOOLS)
        env = {**os.environ, "PYTHONPATH": tmp}
        store = ["--no-journal"] if args.no_journal else ["--data-dir", str(Path(tmp, "data"))]
        proc = subprocess.Popen([sys.executable, "-m", "openfunctions.servers", "serve", "--profile", "tools",
                                 "--module", "bench_tools:tools", "--log-level", "warning", *store],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        try:
            _batch(proc, False, 100), _batch(proc, True, 100)  # warm up both
            res: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.batches):
                for sampling in (False, True):
                    res[sampling].append(_batch(proc, sampling, args.calls))
        finally:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(10)
    plain, lent = statistics.median(res[False]), statistics.median(res[True])
    print(f"journal: {'off' if args.no_journal else 'on'}; median per call: no capability {plain:.0f} us, "
          f"sampling declared {lent:.0f} us; ratio {lent / plain:.3f}")


if __name__ == "__main__":
    main()
