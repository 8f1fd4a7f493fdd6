"""HTTP load against our server and the SDK's MCPServer, in the same run.

A lean load generator: raw HTTP/1.1 keep-alive connections on asyncio (not the
SDK client, which is itself the bottleneck), each client a loop of
``tools/call`` (``hash_text`` of a short string, stateless streamable HTTP,
protocol 2026-07-28). For 50, 200 and 1,000 clients it measures, per server:
calls/s, latency p50/p99, server CPU per call (from /proc), and errors.

Peers: ``openfunctions-mcp serve --transport http --stateless`` (journal on:
every call's receipt is fsynced before its reply, by the event loop once per
loop iteration, ``--journal-sync loop``; ``of_hash_text`` declares
``effect: read``, so it has no start record), the same server with
``--journal-sync thread`` (the journal's writer thread syncs), the same server with
``--no-fast-path`` (every call through the SDK's HTTP layers: the direct
``tools/call`` path's before/after in one run), the same server forced to
``--http h11`` (the parser before httptools was its default), and the SDK's ``MCPServer`` with the same tool, stateless with
JSON responses, under the same uvicorn: as ``uvicorn.run`` configures it in
this environment (``loop="auto"``/``http="auto"``: uvloop and httptools when
installed, which they are with our dependencies: the honest peer) and, for
context, forced to asyncio + h11. ``--profile`` also runs our server once
under cProfile and prints where its CPU goes.

    .venv/bin/python bench/load_http.py [--seconds 6] [--clients 50,200,1000] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench._report import table, write_section  # noqa: E402
from tests._net import free_port, wait_for_port  # noqa: E402

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "load", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}

SDK_SERVER = r"""
import hashlib, sys
import uvicorn
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("sdk-peer")

@mcp.tool()
def of_hash_text(text: str, algorithm: str = "sha256") -> dict:
    "Hash a text."
    data = text.encode()
    return {"algorithm": algorithm, "hex": hashlib.sha256(data).hexdigest(), "bytes": len(data)}

app = mcp.streamable_http_app(stateless_http=True, json_response=True)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False,
            timeout_keep_alive=60, loop=sys.argv[2], http=sys.argv[3])
"""


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def request_bytes(port: int, tool: str, arguments: dict[str, object], rid: int = 1) -> bytes:
    """One raw HTTP/1.1 2026-07-28 ``tools/call`` request (no session: both servers route it to their
    single-exchange handler, in session and stateless mode alike)."""
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": {"name": tool, "arguments": arguments, "_meta": META}}).encode()
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
        f"Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n")[1:] if ln)}
    if b"content-length" in headers:
        return status, await reader.readexactly(int(headers[b"content-length"]))
    body = bytearray()  # chunked (an SSE stream)
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
        chunk = await reader.readexactly(size + 2)
        if size == 0:
            return status, bytes(body)
        body += chunk[:-2]


def _ok(body: bytes) -> bool:
    for line in body.splitlines():  # a JSON body, or the data lines of an SSE stream
        line = line[5:] if line.startswith(b"data:") else line
        if line.strip().startswith(b"{"):
            msg = json.loads(line)
            if "result" in msg or "error" in msg:
                return "result" in msg and msg["result"].get("isError") is not True
    return False


class LeanClients:
    """``clients`` raw keep-alive HTTP/1.1 connections to ``127.0.0.1:port``, each a loop of ``tools/call``.

    The one lean client of the benches: this module's load cells and
    ``bench_server.py``'s ``http x16`` rows. Each reply is read whole
    (Content-Length or a chunked SSE stream) and checked to be a result that
    is not an error; anything else is counted in ``errors``. Connections stay
    open across :meth:`run` calls (``close`` ends them).
    """

    def __init__(self, port: int, clients: int, tool: str = "of_hash_text",
                 arguments: Callable[[int, int], dict[str, object]] | None = None) -> None:
        self.port, self.clients, self.tool = port, clients, tool
        self.arguments = arguments or (lambda n, i: {"text": f"client {n} call {i}"})
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._conns: list[tuple[asyncio.StreamReader, asyncio.StreamWriter] | None] = []
        self._calls = 0

    async def _connect(self) -> None:
        while len(self._conns) < self.clients:
            try:
                self._conns.append(await asyncio.open_connection("127.0.0.1", self.port))
            except OSError as exc:
                self.errors.append(f"connect: {exc.strerror}")
                self._conns.append(None)

    def _request(self, n: int, call_id: int) -> bytes:
        """Client ``n``'s ``tools/call`` number ``call_id``, as bytes on the wire."""
        return request_bytes(self.port, self.tool, self.arguments(n, call_id), call_id)

    async def _loop(self, n: int, deadline: float, calls: int | None) -> None:
        conn = self._conns[n]
        if conn is None:
            return
        reader, writer = conn
        done = 0
        while (done < calls) if calls is not None else (time.perf_counter() < deadline):
            done += 1
            self._calls += 1
            t0 = time.perf_counter()
            writer.write(self._request(n, self._calls))
            try:
                status, body = await _read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                self.errors.append(type(exc).__name__)
                self._conns[n] = None
                return
            if status != 200 or not _ok(body):
                self.errors.append(f"HTTP {status}: {body[:80]!r}")
                continue
            self.latencies.append(time.perf_counter() - t0)

    async def run(self, *, seconds: float | None = None, calls_each: int | None = None) -> float:
        """Every client calls for ``seconds``, or ``calls_each`` times; returns the wall time taken."""
        await self._connect()
        start = time.perf_counter()
        deadline = start + (seconds or 0.0)
        await asyncio.gather(*(self._loop(n, deadline, calls_each) for n in range(self.clients)))
        return time.perf_counter() - start

    def close(self) -> None:
        for conn in self._conns:
            if conn is not None:
                conn[1].close()
        self._conns = []


async def _load(port: int, clients: int, seconds: float) -> tuple[list[float], list[str], float]:
    lean = LeanClients(port, clients)
    try:
        wall = await lean.run(seconds=seconds)
    finally:
        lean.close()
    return lean.latencies, lean.errors, wall


def _start(kind: str, data_dir: Path, profile_out: Path | None = None,
           env: dict[str, str] | None = None) -> tuple[subprocess.Popen, int]:
    """``kind``: ``ours`` (journal on), ``ours-no-journal`` (``--no-journal``), ``ours-no-fast-path``
    (``--no-fast-path``: every call through the SDK's HTTP layers),
    ``ours-h11`` (``--http h11``), ``ours-journal-thread`` (``--journal-sync thread``: the journal's writer
    thread, as stdio uses), ``sdk`` (uvicorn's ``auto`` loop and parser) or ``sdk-asyncio-h11``; ``env``: the server's environment
    (default: this process's)."""
    port = free_port()
    if kind.startswith("ours"):
        prefix = [sys.executable] + (["-m", "cProfile", "-o", str(profile_out)] if profile_out else [])
        argv = prefix + ["-m", "openfunctions.servers", "serve", "--transport", "http", "--stateless", "--port", str(port),
                         "--data-dir", str(data_dir), "--max-connections", "3000", "--keep-alive-timeout", "60"]
        if kind == "ours-no-journal":
            argv.append("--no-journal")
        if kind == "ours-no-fast-path":
            argv.append("--no-fast-path")
        if kind == "ours-h11":
            argv += ["--http", "h11"]
        if kind == "ours-journal-thread":
            argv += ["--journal-sync", "thread"]
    else:
        argv = [sys.executable, "-c", SDK_SERVER, str(port), *(("asyncio", "h11") if kind == "sdk-asyncio-h11" else ("auto", "auto"))]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    wait_for_port(port, proc, timeout=120)
    return proc, port


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(kind: str, clients: int, seconds: float, warmup: float = 1.0) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = _start(kind, Path(tmp))
        try:
            asyncio.run(_load(port, 4, warmup))  # warm-up
            cpu0, gen0 = _cpu_seconds(proc.pid), time.process_time()
            lat, errors, wall = asyncio.run(_load(port, clients, seconds))
            cpu, gen = _cpu_seconds(proc.pid) - cpu0, time.process_time() - gen0
        finally:
            _stop(proc)
    n = len(lat)
    q = statistics.quantiles(lat, n=100) if n >= 2 else [float("nan")] * 99
    return {"kind": kind, "clients": clients, "calls": n, "rate": n / wall, "p50": q[49] * 1000, "p99": q[98] * 1000,
            "cpu_ms": cpu / n * 1000 if n else float("nan"), "gen_cpu_ms": gen / n * 1000 if n else float("nan"),
            "errors": len(errors),
            "error_kinds": sorted(set(e[:40] for e in errors))[:3]}


def _profiled(seconds: float, clients: int) -> tuple[dict, int]:
    import pstats

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "server.prof"
        proc, port = _start("ours", Path(tmp) / "data", out)
        try:
            lat, _, _ = asyncio.run(_load(port, clients, seconds)) if clients else ([], [], 0.0)
        finally:
            _stop(proc)
        return pstats.Stats(str(out)).stats, len(lat)


def profile(seconds: float) -> str:
    """Our server under cProfile with load, minus a run without load (startup and shutdown cancel out)."""
    idle, _ = _profiled(0, 0)
    loaded, calls = _profiled(seconds, 50)
    rows = []
    for key, (_cc, _nc, tt, ct, _callers) in loaded.items():
        base = idle.get(key)
        tt -= base[2] if base else 0.0
        ct -= base[3] if base else 0.0
        file, _line, func = key
        rows.append((ct, tt, f"{Path(file).name}:{func}"))
    total_own = sum(max(tt, 0.0) for _, tt, _ in rows)
    per = 1000 / max(calls, 1)
    lines = [f"cProfile of our server, 50 clients for {seconds:g} s: {calls} calls, {total_own * per:.2f} ms of "
             "profiled CPU per call (a run without load subtracted; cProfile roughly doubles the real cost).", "",
             "Where it goes (cumulative, ms per call):", "", "| function | cumulative | own |", "|---|---|---|"]
    wanted = ("execute_detailed", "_persist_start", "_persist_receipt", "_settle", "_invoke", "_validate", "_capture",
              "_receipt", "append", "on_start", "on_settled", "_on_call_tool", "validate_json", "model_dump_json",
              "run_sync", "handle_request", "_handle_post_request", "serve_loop", "run_asgi", "send")
    seen = []
    for ct, tt, name in sorted(rows, reverse=True):
        if name.split(":", 1)[1] in wanted and len(seen) < 20:
            seen.append(name)
            lines.append(f"| `{name}` | {ct * per:.3f} | {tt * per:.3f} |")
    lines += ["", "Top own time (ms per call):", "", "| function | own |", "|---|---|"]
    lines += [f"| `{name}` | {tt * per:.3f} |" for _, tt, name in sorted(rows, key=lambda r: r[1], reverse=True)[:15]]
    return "\n".join(lines)


KINDS = ("ours", "ours-journal-thread", "ours-no-fast-path", "ours-h11", "sdk", "sdk-asyncio-h11")
NAMES = {"ours": "openfunctions-mcp (journal on)", "ours-no-fast-path": "openfunctions-mcp, --no-fast-path",
         "ours-journal-thread": "openfunctions-mcp, --journal-sync thread",
         "ours-h11": "openfunctions-mcp, --http h11",
         "sdk": "SDK MCPServer (uvicorn auto: uvloop + httptools)", "sdk-asyncio-h11": "SDK MCPServer, asyncio + h11"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--clients", default="50,200,1000")
    ap.add_argument("--profile", action="store_true", help="also profile our server under cProfile")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/PERFORMANCE.md alone")
    args = ap.parse_args()
    results = []
    for clients in [int(c) for c in args.clients.split(",")]:
        for kind in KINDS:
            r = measure(kind, clients, args.seconds)
            print(r, flush=True)
            results.append(r)
    rows = []
    by = {(r["kind"], r["clients"]): r for r in results}
    for clients in sorted({r["clients"] for r in results}):
        ours, sdk = by[("ours", clients)], by[("sdk", clients)]
        for r in (by[(kind, clients)] for kind in KINDS):
            rows.append([clients, NAMES[r["kind"]], f"{r['rate']:.0f}", f"{r['p50']:.1f}", f"{r['p99']:.1f}",
                         f"{r['cpu_ms']:.2f}", f"{r['gen_cpu_ms']:.2f}", r["errors"]])
        rows.append([clients, "**ratio ours/SDK**", f"**{ours['rate'] / sdk['rate']:.2f}×**", "", "",
                     f"{ours['cpu_ms'] / sdk['cpu_ms']:.2f}×", "", ""])
    body = table(["clients", "server", "calls/s", "p50 ms", "p99 ms", "server CPU ms/call", "load generator CPU ms/call",
                  "errors"], rows)
    body += ("\n\nOne raw HTTP/1.1 keep-alive connection per client, `tools/call` of a sha256 tool, stateless, "
             f"{args.seconds:g} s per cell after a 1 s warm-up; the load generator shares the 2 cores with the server. "
             "At 200 and 1,000 clients the one-process load generator and the server compete for the cores (and, "
             "on the shared machine, with other work): those rows measure contention more than the server, and at "
             "1,000 clients each client gets about one call in; the server-CPU-per-call column (from /proc) is the "
             "robust comparison; the load generator's own CPU per call is shown too (it parses each reply, and ours "
             "carries the receipt). The ratio row compares ours (defaults: asyncio's loop, `--http auto` = httptools, "
             "a dependency of ours, `--journal-sync loop`) with the SDK's MCPServer under `uvicorn.run`'s own `auto` choice in the same "
             "environment (uvloop and httptools, both installed here); the `--http h11` and `asyncio + h11` rows show "
             "both on the pure-Python parser; the `--journal-sync thread` row is our server with the journal's "
             "writer thread making receipts durable (docs/design/journal.md). Target: ≥ 1.5× the SDK's calls/s; see the "
             "`server` section (its `http load x50` row and CPU split) for where our CPU per call goes."
             "\n\nPer server thread (the event loop's against the journal writer's), in µs per call, with old and new code side by side: `python bench/profile_served.py --clients 16 --rounds 3 ours@main ours` (prints only).")
    if args.profile:
        prof = profile(args.seconds)
        print(prof)
        body += "\n\n" + prof
    if not args.no_write:
        cmd = f"python bench/load_http.py --seconds {args.seconds:g} --clients {args.clients}" + (
            " --profile" if args.profile else "")
        write_section("load_http", "HTTP load: openfunctions-mcp vs the SDK's MCPServer (bench/load_http.py)", body, cmd)
    print(body)


if __name__ == "__main__":
    main()
