"""Calls per second of a no-op tool: our MCP server vs the SDK's own ``MCPServer``.

Both serve the same tool (``noop``: no arguments, returns the text "ok").
Ours runs it through the executor with receipts on and the journal off
(``--no-journal``), and again with the journal on (the default server)
over stdio and HTTP x16, for a declared read (``noop``: one fsync per call,
the receipt) and a declared write (``noop_write``: two, start and receipt):
what durability costs. The SDK's runs the same tools through ``MCPServer``. Measured in one
run, rounds interleaved (ours, SDK, ours, ...) so machine noise hits both:

- ``in-process``: ``mcp.Client(server)`` (no transport, direct dispatch);
- ``stdio``: ``mcp.Client`` driving the server as a subprocess (the ``handshake era`` rows:
  ``mode="legacy"``, an ``initialize`` session at 2025-11-25, as today's hosts open; journal off, journal
  on, and journal on fsynced by its writer thread, ``--journal-sync thread``);
- ``http x1, mcp.Client``: one ``mcp.Client`` over streamable HTTP on 127.0.0.1;
- ``http x16, mcp.Client``: 16 concurrent ``mcp.Client`` s in this process (client-bound: ~2-3 ms of
  client CPU per call, more than either server's);
- ``http x16``: 16 concurrent raw keep-alive connections driven by
  ``load_http.LeanClients`` (the lean client, ~0.2 ms of client CPU per call), each server's
  2026-07-28 single-exchange path;
- ``http load x50``: ``bench/load_http.py``'s raw-HTTP load generator (50
  keep-alive clients, ``of_hash_text``, stateless, journal on) against both
  servers, a few interleaved pairs; server CPU per call from /proc.

It also measures the **fsync floor** in the same run: the latency of one
serial ``write`` + ``fdatasync`` of a 500-byte line on the disk the journal
uses, into room reserved beforehand as the execution journal writes. A serial client's journaled call waits at least one (read-only tool)
or two (effectful tool) of them, so that floor against the SDK's whole call
says whether the stdio targets are reachable on this disk at all.

Reports median calls/s over the rounds and the median per-round ratio
ours/SDK (rounds run back to back in pairs), and writes
the table into docs/PERFORMANCE.md (section ``server``).

    python bench/bench_server.py            # full (~1-2 min)
    python bench/bench_server.py --quick    # smoke run, a few seconds per mode
    python bench/bench_server.py --smoke --no-write  # every mode once with a handful of calls (the test's run)

This file is also the server side of the subprocess modes:
``--serve-sdk stdio|http`` runs the SDK peer, and ``--module
bench_server:registry`` (with ``bench/`` on PYTHONPATH) gives our CLI the tool.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from openfunctions.core import ToolRegistry, define_tool

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(BENCH.parent))  # the checkout, for the port helper the tests share
import load_http  # noqa: E402
from _report import median, table, write_section  # noqa: E402

from tests._net import free_port, wait_for_port  # noqa: E402


async def _noop(params: dict[str, Any], ctx: Any) -> str:
    return "ok"


def _noop_tool() -> Any:
    return define_tool(
        name="noop",
        description="Does nothing and returns 'ok'.",
        input_schema={"type": "object", "properties": {}},
        handler=_noop,
        capability={"effect": "read", "parallel_safe": True, "idempotent": True},
    )


def _noop_write_tool() -> Any:
    # The same handler declared effectful: the journal makes its start durable before the handler.
    return define_tool(
        name="noop_write",
        description="Does nothing, but declares a write effect; returns 'ok'.",
        input_schema={"type": "object", "properties": {}},
        handler=_noop,
        capability={"effect": "write"},
    )


registry = ToolRegistry([_noop_tool(), _noop_write_tool()])
"""What ``openfunctions-mcp serve --module bench_server:registry`` serves."""


def _sdk_server() -> Any:
    from mcp.server.mcpserver import MCPServer

    mcp = MCPServer("bench-sdk")

    @mcp.tool()
    def noop() -> str:
        """Does nothing and returns 'ok'."""
        return "ok"

    @mcp.tool()
    def noop_write() -> str:
        """Does nothing and returns 'ok' (the SDK has no effect declaration: identical to noop)."""
        return "ok"

    return mcp


def _our_server() -> Any:
    from openfunctions.servers import create_mcp_server

    return create_mcp_server(ToolRegistry([_noop_tool()]), name="bench-ours", version="0", journal_dir=None)


def _serve_sdk(transport: str, port: int) -> None:
    mcp = _sdk_server()
    if transport == "stdio":
        mcp.run("stdio")
        return
    import uvicorn

    # Same HTTP settings as our CLI: no access log, warnings only.
    app = mcp.streamable_http_app(host="127.0.0.1")
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# -- subprocesses ------------------------------------------------------------------


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH), os.environ.get("PYTHONPATH", "")])}


def _ours_cmd(data_dir: Path, *extra: str, journal: bool = False) -> list[str]:
    script = Path(sys.executable).with_name("openfunctions-mcp")
    base = [str(script)] if script.exists() else [sys.executable, "-m", "openfunctions.servers"]
    return [*base, "serve", "--module", "bench_server:registry", "--no-example-tools",
            *(() if journal else ("--no-journal",)),
            "--data-dir", str(data_dir), "--log-level", "warning", *extra]


def _sdk_cmd(transport: str, port: int = 0) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), "--serve-sdk", transport, "--port", str(port)]


class _HttpProc:
    def __init__(self, cmd: list[str], port: int, log: Path) -> None:
        self.port = port
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as out:  # a file, not a pipe: an undrained pipe would stall a chatty server
            self.proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=out)
        wait_for_port(port, self.proc, timeout=60, output=log.read_text)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- measurement -----------------------------------------------------------------


class LeanSessionClients(load_http.LeanClients):
    """``load_http.LeanClients`` on handshake-era sessions: each connection opens its own ``Mcp-Session-Id``
    session (``initialize`` at 2025-11-25, then ``notifications/initialized``), and every call carries the session
    id and the negotiated version, no envelope (what today's hosts send over streamable HTTP)."""

    VERSION = "2025-11-25"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sessions: list[str] = []

    def _post(self, body: dict[str, Any], session: str | None) -> bytes:
        data = json.dumps(body).encode()
        extra = "" if session is None else f"Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {self.VERSION}\r\n"
        return (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nContent-Type: application/json\r\n"
                f"Accept: application/json, text/event-stream\r\n{extra}Content-Length: {len(data)}\r\n\r\n").encode() + data

    async def _connect(self) -> None:
        await super()._connect()
        while len(self._sessions) < len(self._conns):
            conn = self._conns[len(self._sessions)]
            if conn is None:
                self._sessions.append("")
                continue
            reader, writer = conn
            writer.write(self._post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": self.VERSION, "capabilities": {}, "clientInfo": {"name": "lean", "version": "0"}}}, None))
            head = await reader.readuntil(b"\r\n\r\n")
            session = next(line.split(b":", 1)[1].strip().decode() for line in head.split(b"\r\n")
                           if line.lower().startswith(b"mcp-session-id:"))
            await _rest_of_body(reader, head)
            writer.write(self._post({"jsonrpc": "2.0", "method": "notifications/initialized"}, session))
            head = await reader.readuntil(b"\r\n\r\n")
            await _rest_of_body(reader, head)
            self._sessions.append(session)

    def _request(self, n: int, call_id: int) -> bytes:
        return self._post({"jsonrpc": "2.0", "id": call_id, "method": "tools/call",
                           "params": {"name": self.tool, "arguments": self.arguments(n, call_id)}}, self._sessions[n])


async def _rest_of_body(reader: asyncio.StreamReader, head: bytes) -> None:
    """Read (and drop) the body of a response whose head was read."""
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n")[1:] if ln)}
    if b"content-length" in headers:
        await reader.readexactly(int(headers[b"content-length"]))
        return
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
        await reader.readexactly(size + 2)
        if size == 0:
            return


async def _calls(client: Any, n: int, tool: str = "noop") -> None:
    for _ in range(n):
        result = await client.call_tool(tool, {})
        if result.is_error:
            raise RuntimeError(f"{tool} failed: {result.content}")


async def _rate(clients: list[Any], total: int, tool: str = "noop") -> float:
    """Calls/s for ``total`` calls spread evenly over ``clients`` running concurrently."""
    per = total // len(clients)
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for c in clients:
            tg.start_soon(_calls, c, per, tool)
    return per * len(clients) / (time.perf_counter() - start)


class _Target:
    """One server in one mode, with its clients open across rounds."""

    def __init__(self, label: str, make_clients: Callable[[], list[Any]] = lambda: [], close: Callable[[], None] = lambda: None,
                 tool: str = "noop", pid: int | None = None, lean: tuple[int, int] | None = None, sessions: bool = False):
        self.label, self.make_clients, self.close, self.tool = label, make_clients, close, tool
        self.lean = lean  # (port, clients): driven by load_http.LeanClients (raw HTTP) instead of mcp.Client
        self.sessions = sessions  # lean clients on handshake-era sessions (LeanSessionClients)
        self.rates: list[float] = []
        self.pid = pid  # the server process, when it is one: its CPU per call is recorded per round
        self.server_cpu_ms: list[float] = []  # server process CPU per call
        self.client_cpu_ms: list[float] = []  # this (client) process's CPU per call


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _open(t: _Target, stack: Any, warmup: int) -> Any:
    """Open a target's clients (kept across rounds) and warm them up: ``mcp.Client`` s or one ``LeanClients``."""
    if t.lean is not None:
        port, k = t.lean
        lean = (LeanSessionClients if t.sessions else load_http.LeanClients)(port, k, t.tool, lambda n, i: {})
        stack.callback(lean.close)
        await lean.run(calls_each=max(1, warmup // 4))
        return lean
    clients = [await stack.enter_async_context(c) for c in t.make_clients()]
    await _rate(clients, warmup * len(clients), t.tool)
    return clients


async def _round(t: _Target, clients: Any, n: int) -> tuple[float, int]:
    """One round of ``n`` calls spread over the target's clients: (calls/s, calls made)."""
    if isinstance(clients, load_http.LeanClients):
        before = len(clients.latencies)
        wall = await clients.run(calls_each=n // clients.clients)
        if clients.errors:
            raise RuntimeError(f"{t.label} ({t.tool}): {clients.errors[:3]}")
        calls = len(clients.latencies) - before
        return calls / wall, calls
    return await _rate(clients, n, t.tool), n // len(clients) * len(clients)


async def _run_mode(mode: str, targets: list[_Target], n: int, rounds: int, warmup: int) -> None:
    from contextlib import AsyncExitStack

    async with AsyncExitStack() as stack:
        opened = [(t, await _open(t, stack, warmup)) for t in targets]
        for _ in range(rounds):
            for t, clients in opened:
                server0 = _cpu_seconds(t.pid) if t.pid is not None else 0.0
                client0 = time.process_time()
                rate, calls = await _round(t, clients, n)
                t.rates.append(rate)
                t.client_cpu_ms.append((time.process_time() - client0) / calls * 1000)
                if t.pid is not None:
                    t.server_cpu_ms.append((_cpu_seconds(t.pid) - server0) / calls * 1000)
    for t in targets:
        t.close()
    print(f"  {mode:<11} " + "  ".join(f"{t.label}: {median(t.rates):8.0f}/s" for t in targets), flush=True)


def fsync_floor(directory: Path, n: int = 200) -> list[float]:
    """Latencies (ms) of ``n`` serial write + fdatasync of a 500-byte line to a new file in ``directory``, into room
    reserved beforehand, as the execution journal writes (docs/formats/journal.md, "Reserved room")."""
    path = directory / "fsync-floor.probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    line = b"x" * 499 + b"\n"
    out = []
    try:
        os.posix_fallocate(fd, 0, len(line) * n + 4096)
        os.fdatasync(fd)
        for _ in range(n):
            t0 = time.perf_counter()
            os.write(fd, line)
            os.fdatasync(fd)
            out.append((time.perf_counter() - t0) * 1000)
    finally:
        os.close(fd)
        path.unlink()
    return out


def floor_table(floors: list[float], rates: dict[str, tuple[float, float, float]]) -> str:
    """Whether a serial journaled stdio call can reach the targets on this disk: the fsync floor against the SDK's call,
    for each protocol era (its SDK call and our journal-off call from that era's rows of the same run)."""
    ordered = sorted(floors)
    fs = median(ordered)
    p10, p90 = ordered[len(ordered) // 10], ordered[len(ordered) * 9 // 10]
    rows: list[list[object]] = [
        [f"fsync floor: one serial write + fdatasync of 500 B into reserved room, median ({len(ordered)} samples; p10-p90)",
         f"{fs:.2f} ({p10:.2f}-{p90:.2f})"]]
    verdict = []
    eras = (("2026-07-28", "stdio, journal on, read-only tool", "stdio", 0.8),
            ("handshake era", "stdio, handshake era, journal on, read-only tool", "stdio, handshake era, journal off, read-only tool", 0.85))
    for era, journaled, journal_off, write_target in eras:
        if journaled not in rates or journal_off not in rates:
            continue
        sdk_ms = 1000 / rates[journaled][1]
        # Our journal-off call at the same moment: the SDK's call over the journal-off row's paired ratio (same-time pairs).
        ours_ms = sdk_ms / rates[journal_off][2]
        read_cap, write_cap = sdk_ms / (ours_ms + fs), sdk_ms / (ours_ms + 2 * fs)
        rows += [
            [f"{era}: SDK MCPServer stdio call (1000 / its calls/s in the journaled read-only row)", f"{sdk_ms:.2f}"],
            [f"{era}: fsync floor alone / SDK call (the share of an SDK call one fsync takes)", f"{fs / sdk_ms:.2f}"],
            [f"{era}: our stdio call, journal off (the SDK call / the journal-off row's paired ratio)", f"{ours_ms:.2f}"],
            [f"{era}: read-only ceiling: SDK call / (our journal-off call + 1 fsync)", f"{read_cap:.2f}×"],
            [f"{era}: effectful ceiling: SDK call / (our journal-off call + 2 fsyncs)", f"{write_cap:.2f}×"],
        ]
        for name, cap, target in (("read-only", read_cap, 1.0), ("effectful", write_cap, write_target)):
            if cap < target:
                verdict.append(f"the {era} stdio {name} target ({target:.2f}×) is physically out of reach on this disk "
                               f"in this run: even with every other cost of the durable path at zero, the ceiling is "
                               f"{cap:.2f}×")
            else:
                verdict.append(f"the {era} stdio {name} target ({target:.2f}×) is within the disk's ceiling ({cap:.2f}×)")
    return (table(["serial stdio call: the fsync floor (same run, same disk)", "ms"], rows)
            + "\n\nA serial client sends its next call only after the reply, and the reply waits for the receipt's "
            "fdatasync (and an effectful tool's start record, fsynced before its handler): one or two fsyncs per call "
            "that the SDK's server, which persists nothing, does not pay. So: " + "; ".join(verdict) + ".")


def load_rows(rounds: int, seconds: float, warmup: float = 1.0) -> tuple[list[list[object]], str]:
    """``bench/load_http.py`` at 50 clients, ours vs the SDK, ``rounds`` interleaved pairs: a table row and a note.

    Each round also measures our server with ``--no-journal``, so the note can
    split our server CPU per call into the journal's share and the rest.
    """
    import load_http

    ours, bare, slow, sdk = [], [], [], []
    for _ in range(rounds):
        ours.append(load_http.measure("ours", 50, seconds, warmup=warmup))
        bare.append(load_http.measure("ours-no-journal", 50, seconds, warmup=warmup))
        slow.append(load_http.measure("ours-no-fast-path", 50, seconds, warmup=warmup))
        sdk.append(load_http.measure("sdk", 50, seconds, warmup=warmup))
    paired = median([o["rate"] / s["rate"] for o, s in zip(ours, sdk, strict=True)])
    paired_slow = median([o["rate"] / s["rate"] for o, s in zip(slow, sdk, strict=True)])
    o_rate, s_rate = median([r["rate"] for r in ours]), median([r["rate"] for r in sdk])
    o_cpu, b_cpu, f_cpu, s_cpu = (median([r["cpu_ms"] for r in cells]) for cells in (ours, bare, slow, sdk))
    errors = sum(r["errors"] for r in ours + bare + slow + sdk)
    rows: list[list[object]] = [
        ["http load x50 (raw HTTP, of_hash_text, journal on)", f"{seconds:g} s", f"{o_rate:,.0f}", f"{s_rate:,.0f}",
         f"{paired:.2f}x"],
        ["http load x50, --no-fast-path", f"{seconds:g} s", f"{median([r['rate'] for r in slow]):,.0f}",
         f"{s_rate:,.0f}", f"{paired_slow:.2f}x"],
    ]
    note = (f"`http load x50`: `bench/load_http.py`'s generator, 50 raw keep-alive clients, {rounds} interleaved "
            f"cells of {seconds:g} s per server. Server CPU per call (from /proc, medians): ours journal on "
            f"**{o_cpu:.2f} ms**, ours `--no-journal` **{b_cpu:.2f} ms** (so the journal costs about "
            f"{o_cpu - b_cpu:.2f} ms of CPU per call: encoding, the event loop's write + fdatasync once per loop iteration, the wake-up), "
            f"ours journal on with `--no-fast-path` **{f_cpu:.2f} ms** (every call through the SDK's HTTP layers), "
            f"SDK MCPServer **{s_cpu:.2f} ms** (ours/SDK {o_cpu / s_cpu:.2f}×). Throughput here is bounded by CPU "
            f"(two cores shared with the load generator), so calls/s follow CPU per call; errors {errors}.")
    return rows, note


async def bench(
    n_inproc: int, n_stdio: int, n_http: int, rounds: int, tmp: Path, floors: list[float] | None = None,
    rates: dict[str, tuple[float, float, float]] | None = None, cpu_rows: list[list[object]] | None = None,
    smoke: bool = False,
) -> list[list[object]]:
    """The table rows; ``floors`` collects fsync-floor samples (ms), ``rates`` each mode's (ours, SDK, paired ratio).

    ``smoke``: a few warm-up calls and fsync probes instead of the measuring run's (``--smoke``).
    """
    from mcp import Client, StdioServerParameters

    def client(target: Any) -> Any:
        return Client(target, read_timeout_seconds=60)

    def legacy(target: Any) -> Any:  # a handshake-era session (2025-11-25), as today's hosts open
        return Client(target, read_timeout_seconds=60, mode="legacy")

    rows: list[list[object]] = []
    cpu_rows = [] if cpu_rows is None else cpu_rows
    floors = [] if floors is None else floors
    rates = {} if rates is None else rates

    async def mode(name: str, ours: _Target, sdk: _Target, n: int) -> None:
        if ONLY and not any(part in name for part in ONLY):
            return
        await _run_mode(name, [ours, sdk], n, rounds, warmup=4 if smoke else max(20, n // 5))
        if ours.server_cpu_ms and sdk.server_cpu_ms:
            kind = "lean raw HTTP (load_http.LeanClients)" if ours.lean else "`mcp.Client`"
            cpu_rows.append([name, kind, f"{median(ours.server_cpu_ms):.2f}", f"{median(sdk.server_cpu_ms):.2f}",
                             f"{median(ours.client_cpu_ms):.2f}", f"{median(sdk.client_cpu_ms):.2f}"])
        o, s = median(ours.rates), median(sdk.rates)
        # Rounds alternate ours/SDK back to back, so each pair saw about the same machine load.
        paired = median([a / b for a, b in zip(ours.rates, sdk.rates, strict=True)])
        rows.append([name, n, f"{o:,.0f}", f"{s:,.0f}", f"{paired:.2f}x"])
        rates[name] = (o, s, paired)

    our_srv, sdk_srv = _our_server(), _sdk_server()
    await mode("in-process", _Target("ours", lambda: [client(our_srv.lowlevel)]),
               _Target("sdk", lambda: [client(sdk_srv)]), n_inproc)

    ours_stdio = StdioServerParameters(command=_ours_cmd(tmp / "stdio")[0], args=_ours_cmd(tmp / "stdio")[1:], env=_env())
    sdk_stdio = StdioServerParameters(command=sys.executable, args=_sdk_cmd("stdio")[1:], env=_env())
    await mode("stdio", _Target("ours", lambda: [client(ours_stdio)]), _Target("sdk", lambda: [client(sdk_stdio)]),
               n_stdio)
    # What durability costs: the default server (execution journal on). A
    # declared read fsyncs its receipt before the reply (no start record); an
    # effectful tool also fsyncs a start record before its handler.
    floors += fsync_floor(tmp, 20 if smoke else 200)  # the same disk as the journals, right before and after the journaled stdio rows
    journaled = _ours_cmd(tmp / "stdio-journal", journal=True)
    ours_journal = StdioServerParameters(command=journaled[0], args=journaled[1:], env=_env())
    await mode("stdio, journal on, read-only tool", _Target("ours+journal", lambda: [client(ours_journal)]),
               _Target("sdk", lambda: [client(sdk_stdio)]), n_stdio)
    await mode("stdio, journal on, effectful tool",
               _Target("ours+journal", lambda: [client(ours_journal)], tool="noop_write"),
               _Target("sdk", lambda: [client(sdk_stdio)], tool="noop_write"), n_stdio)
    # The same server with the direct tools/call path off: every call through the SDK's layers (before/after).
    slow_path = _ours_cmd(tmp / "stdio-journal-sdk-path", "--no-fast-path", journal=True)
    ours_slow_path = StdioServerParameters(command=slow_path[0], args=slow_path[1:], env=_env())
    await mode("stdio, journal on, read-only tool, --no-fast-path",
               _Target("ours+journal", lambda: [client(ours_slow_path)]),
               _Target("sdk", lambda: [client(sdk_stdio)]), n_stdio)

    # The same rows for a handshake-era session (`mode="legacy"`: initialize, 2025-11-25), both servers; first
    # journal off (`--no-journal`), the base of that era's fsync-floor ceiling.
    await mode("stdio, handshake era, journal off, read-only tool", _Target("ours", lambda: [legacy(ours_stdio)]),
               _Target("sdk", lambda: [legacy(sdk_stdio)]), n_stdio)
    await mode("stdio, handshake era, journal on, read-only tool", _Target("ours+journal", lambda: [legacy(ours_journal)]),
               _Target("sdk", lambda: [legacy(sdk_stdio)]), n_stdio)
    await mode("stdio, handshake era, journal on, effectful tool",
               _Target("ours+journal", lambda: [legacy(ours_journal)], tool="noop_write"),
               _Target("sdk", lambda: [legacy(sdk_stdio)], tool="noop_write"), n_stdio)
    # The same with the journal fsynced by its writer thread (`--journal-sync thread`; the default is the loop).
    on_thread = _ours_cmd(tmp / "stdio-journal-thread", "--journal-sync", "thread", journal=True)
    ours_on_thread = StdioServerParameters(command=on_thread[0], args=on_thread[1:], env=_env())
    await mode("stdio, handshake era, journal on, read-only tool, --journal-sync thread",
               _Target("ours+journal", lambda: [legacy(ours_on_thread)]),
               _Target("sdk", lambda: [legacy(sdk_stdio)]), n_stdio)
    await mode("stdio, handshake era, journal on, effectful tool, --journal-sync thread",
               _Target("ours+journal", lambda: [legacy(ours_on_thread)], tool="noop_write"),
               _Target("sdk", lambda: [legacy(sdk_stdio)], tool="noop_write"), n_stdio)
    await mode("stdio, handshake era, journal on, read-only tool, --no-fast-path",
               _Target("ours+journal", lambda: [legacy(ours_slow_path)]),
               _Target("sdk", lambda: [legacy(sdk_stdio)]), n_stdio)

    # The same default server on uvloop (`--loop uvloop`, opt-in): what the loop alone does for stdio.
    on_uvloop = _ours_cmd(tmp / "stdio-journal-uvloop", "--loop", "uvloop", journal=True)
    ours_uvloop = StdioServerParameters(command=on_uvloop[0], args=on_uvloop[1:], env=_env())
    await mode("stdio, journal on, read-only tool, --loop uvloop",
               _Target("ours+journal", lambda: [client(ours_uvloop)]),
               _Target("sdk", lambda: [client(sdk_stdio)]), n_stdio)

    floors += fsync_floor(tmp, 20 if smoke else 200)
    p1, p2, p3, p4 = free_port(), free_port(), free_port(), free_port()
    ours_http = _HttpProc(_ours_cmd(tmp / "http", "--transport", "http", "--port", str(p1)), p1, tmp / "ours-http.log")
    sdk_http = _HttpProc(_sdk_cmd("http", p2), p2, tmp / "sdk-http.log")
    ours_http_j = _HttpProc(_ours_cmd(tmp / "http-journal", "--transport", "http", "--port", str(p3), journal=True), p3,
                            tmp / "ours-http-journal.log")
    ours_http_slow = _HttpProc(_ours_cmd(tmp / "http-journal-sdk-path", "--transport", "http", "--port", str(p4),
                                         "--no-fast-path", journal=True), p4, tmp / "ours-http-sdk-path.log")
    try:
        # mcp.Client rows: the clients share this process, whose CPU per call (~3 ms) bounds x16 on both sides.
        await mode("http x1, mcp.Client", _Target("ours", lambda: [client(ours_http.url)], pid=ours_http.proc.pid),
                   _Target("sdk", lambda: [client(sdk_http.url)], pid=sdk_http.proc.pid), n_http)
        await mode("http x16, mcp.Client, journal on, read-only tool",
                   _Target("ours+journal", lambda: [client(ours_http_j.url) for _ in range(16)], pid=ours_http_j.proc.pid),
                   _Target("sdk", lambda: [client(sdk_http.url) for _ in range(16)], pid=sdk_http.proc.pid), n_http * 2)
        await mode("http x16, mcp.Client, handshake era, journal on, read-only tool",
                   _Target("ours+journal", lambda: [legacy(ours_http_j.url) for _ in range(16)], pid=ours_http_j.proc.pid),
                   _Target("sdk", lambda: [legacy(sdk_http.url) for _ in range(16)], pid=sdk_http.proc.pid), n_http * 2)
        # Lean rows (the x16 target): 16 raw keep-alive connections (load_http.LeanClients), 2026-07-28.
        n_lean = n_http * 5

        def lean(label: str, proc: _HttpProc, tool: str = "noop", sessions: bool = False) -> _Target:
            return _Target(label, tool=tool, pid=proc.proc.pid, lean=(proc.port, 16), sessions=sessions)

        await mode("http x16", lean("ours", ours_http), lean("sdk", sdk_http), n_lean)
        await mode("http x16, journal on, read-only tool", lean("ours+journal", ours_http_j), lean("sdk", sdk_http),
                   n_lean)
        await mode("http x16, journal on, effectful tool", lean("ours+journal", ours_http_j, "noop_write"),
                   lean("sdk", sdk_http, "noop_write"), n_lean)
        await mode("http x16, journal on, read-only tool, --no-fast-path", lean("ours+journal", ours_http_slow),
                   lean("sdk", sdk_http), n_lean)
        # The same on handshake-era sessions (LeanSessionClients: one Mcp-Session-Id session per connection).
        await mode("http x16, handshake era, journal on, read-only tool", lean("ours+journal", ours_http_j, sessions=True),
                   lean("sdk", sdk_http, sessions=True), n_lean)
        await mode("http x16, handshake era, journal on, effectful tool",
                   lean("ours+journal", ours_http_j, "noop_write", sessions=True),
                   lean("sdk", sdk_http, "noop_write", sessions=True), n_lean)
        await mode("http x16, handshake era, journal on, read-only tool, --no-fast-path",
                   lean("ours+journal", ours_http_slow, sessions=True), lean("sdk", sdk_http, sessions=True), n_lean)
    finally:
        ours_http.stop()
        sdk_http.stop()
        ours_http_j.stop()
        ours_http_slow.stop()
    return rows


ONLY: list[str] = []  # --only: the modes to run (all when empty)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few calls per round, 3 rounds (a smoke run)")
    ap.add_argument("--smoke", action="store_true",
                    help="every mode and row once with a handful of calls: checks the bench runs; its figures mean nothing")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per mode (default 15; 3 with --quick)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/PERFORMANCE.md alone")
    ap.add_argument("--only", action="append", default=[], metavar="TEXT",
                    help="run only the modes whose name contains TEXT (repeatable; implies --no-write, skips the load rows)")
    ap.add_argument("--serve-sdk", choices=("stdio", "http"), help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve_sdk:
        _serve_sdk(args.serve_sdk, args.port)
        return 0

    import tempfile

    ONLY.extend(args.only)
    rounds = args.rounds or (1 if args.smoke else 3 if args.quick else 15)
    n_inproc, n_stdio, n_http = (20, 16, 8) if args.smoke else (200, 100, 50) if args.quick else (400, 200, 80)
    print(f"bench_server: no-op tool, {rounds} rounds per mode (median calls/s)", flush=True)
    floors: list[float] = []
    rates: dict[str, tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cpu_rows: list[list[object]] = []
        rows = anyio.run(bench, n_inproc, n_stdio, n_http, rounds, Path(tmp), floors, rates, cpu_rows, args.smoke)
    if ONLY:
        print(table(["mode", "calls/round", "ours (calls/s)", "SDK MCPServer (calls/s)", "ours/SDK (paired)"], rows))
        print(table(["HTTP mode: CPU ms per call (medians)", "client", "our server", "SDK server",
                     "client process (vs ours)", "client process (vs SDK)"], cpu_rows))
        print(f"1-minute load average: {os.getloadavg()[0]:.1f}")
        return 0
    load_rounds, load_seconds = (1, 2.0) if args.quick or args.smoke else (3, 4.0)
    load_table_rows, load_note = load_rows(load_rounds, 0.3 if args.smoke else load_seconds, warmup=0.2 if args.smoke else 1.0)
    rows += load_table_rows
    load = os.getloadavg()[0]
    body = table(["mode", "calls/round", "ours (calls/s)", "SDK MCPServer (calls/s)", "ours/SDK (paired)"], rows)
    body += "\n\n" + load_note + "\n\n" + floor_table(floors, rates)
    body += "\n\n" + table(["HTTP mode: CPU ms per call (medians)", "client", "our server", "SDK server",
                             "client process (vs ours)", "client process (vs SDK)"], cpu_rows)
    body += ("\n\nClients of the HTTP rows: the rows named `mcp.Client` drive each server with the SDK's client "
             "(16 of them in one Python process, this bench's, on the same two cores as the server); its CPU per call "
             "(the `client process` columns) is larger than either server's, so those rows follow the client's cost. "
             "The other `http x16` rows (the target rows) use `bench/load_http.py`'s lean client "
             "(`LeanClients`: 16 raw HTTP/1.1 keep-alive connections on asyncio, 2026-07-28 `tools/call` without a "
             "session, the reply read whole and checked), the same piece of code as the `load_http` section, whose "
             "own CPU per call is shown in the same columns. The raw-HTTP `http load x50` row uses it too.")
    print(body)
    if not args.no_write:
        note = (
            "One no-op tool (`noop`, returns \"ok\") served by `openfunctions-mcp` (receipts on, `--no-journal`) "
            "and by the SDK's `MCPServer`, driven by `mcp.Client` (default `auto` mode; in-process, stdio and the "
            "HTTP rows named `mcp.Client`) or by the lean raw-HTTP client (the other HTTP rows) in the same run, "
            f"rounds interleaved; medians over {rounds} rounds, and the median of the per-round ratios (each pair of "
            "rounds ran back to back, so it saw about the same machine load). `http x16` is 16 concurrent "
            "clients, each with its own connection, against one server process; the clients share one Python "
            "process (this bench's), whose CPU per call is in the CPU table below. Ours also validates "
            "arguments, schedules the call and builds a receipt (sha256 of spec, params and result) for every call. The `journal on` rows are "
            "the default server (no `--no-journal`): every call fsyncs its receipt before the reply, and a tool "
            "that declares an effect (`noop_write`, `effect: write`) also fsyncs a start record before its "
            "handler; a declared read (`noop`, `effect: read`) needs no start record (docs/formats/receipt.md). "
            "The SDK persists nothing — these rows show what durability costs, not a like-for-like race. "
            "Targets for the journal-on rows: stdio read-only >= 1.0x, stdio effectful >= 0.8x, "
            "http x16 >= 1.5x; for the load row: >= 1.5x. Ours runs on its defaults (asyncio's loop; "
            "`--http auto` = httptools, a dependency of ours); the SDK's stdio server runs on asyncio (its "
            "`run(\"stdio\")`), its HTTP server under `uvicorn.run`'s own `auto` (uvloop and httptools, both "
            "installed here); the `--loop uvloop` row is our default server on uvloop (opt-in). The `--no-fast-path` rows are the same "
            "default server with the direct `tools/call` path off (every call through the SDK's transport layers; "
            "docs/SERVERS.md): before/after in one run. The `handshake era` rows are the same servers and tools on "
            "sessions opened with `initialize` at 2025-11-25, as today's hosts open them: over stdio `mcp.Client` "
            "with `mode=\"legacy\"`, over HTTP one `Mcp-Session-Id` session per connection (`LeanSessionClients` in "
            "this file: the lean client with the session's headers and no envelope; each SDK reply is an SSE stream). "
            "On those sessions ours also stores every SSE event for resumption (`--resumable`, on by default); the "
            "SDK's `MCPServer` app stores none. The `--journal-sync thread` rows are the same stdio server with its "
            "journal fsynced by its writer thread instead of the event loop (the default on both transports since "
            "the journal reserves room; docs/design/journal.md, 'stdio syncs on the event loop too', has the "
            "trade-off); the `journal off` handshake-era row is the base of that "
            "era's fsync-floor ceiling. Targets for the handshake-era journal-on rows: stdio read-only >= 1.0x, "
            "stdio effectful >= 0.85x, http x16 read-only >= 1.5x. The fsync-floor table below says whether the "
            "stdio targets are reachable on this disk at all; docs/design/http-fast-path.md has the per-stage "
            "profile and why the HTTP targets are out of reach while the SDK's HTTP stack (shared by both servers) "
            "is most of the CPU of a call. "
            f"1-minute load average at the end of the run: {load:.1f} on a shared machine, so absolute rates "
            "move between runs; the ratios are the figure to quote.\n\n"
        )
        cmd = "python bench/bench_server.py" + (" --quick" if args.quick else "") + (f" --rounds {args.rounds}" if args.rounds else "")
        from _chart import chart_for

        body = body.replace("\n\n", "\n\n" + chart_for("server", rows) + "\n\n", 1)  # the chart under the first table
        write_section("server", "MCP server: calls/s vs the SDK's MCPServer", note + body, cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
