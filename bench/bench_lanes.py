"""Scoped write barriers under HTTP load: ours vs the SDK's ``MCPServer``, in one run.

Every tool here sleeps 200 ms (an external effect: an HTTP call, a database
write) and returns ``{"ok": true}``. The load is ``load_http.LeanClients``
(raw keep-alive HTTP/1.1 connections, each a loop of 2026-07-28
``tools/call``), 10 and 100 clients, a few seconds per row. Rows:

- ``SDK MCPServer``: the same tool, stateless JSON, under uvicorn (no scheduling at all);
- ``ours, parallel_safe``: ``effect: external, parallel_safe: true`` (the write pool);
- ``ours, distinct keys``: ``conflict_keys: ["/key"]``, each client its own key;
- the same two with ``--no-journal`` (what the two fsyncs of a journaled effectful
  call, its start record before the handler and its receipt after, add to its latency);
- ``ours, one shared key``: the same tool, every client the same key (one at a
  time: about 1 / 200 ms = 5 calls/s, by design);
- ``ours, unclassified``: no capability (a registry-wide barrier: about 5 calls/s, as before).

Ours is ``openfunctions-mcp serve --transport http --stateless`` with its
journal on (each call's start record and receipt fsynced), and a second one
with ``--no-journal``. Rows run one after another; the SDK row and the
parallel_safe / distinct keys rows are interleaved per round (``--rounds``), and
the ratio is the median of per-round ratios. A serialized row lasts until the calls its
clients started finish (100 clients x 200 ms = 20 s), so its calls/s is
completed calls / wall time.

    .venv/bin/python bench/bench_lanes.py [--seconds 3] [--rounds 1] [--clients 10,100] [--no-write]

Writes the table into docs/PERFORMANCE.md (section ``lanes``) unless ``--no-write``.
The module is also the tool source of our server: ``--module bench_lanes:registry``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

from _report import table, write_section  # noqa: E402
from load_http import LeanClients  # noqa: E402

from tests._net import free_port, wait_for_port  # noqa: E402

EFFECT_S = 0.2

SDK_SERVER = r"""
import sys
import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("sdk-peer")

@mcp.tool()
async def sleep_effect(key: str = "") -> dict:
    "Waits 200 ms (an external effect) and returns ok."
    await anyio.sleep(0.2)
    return {"ok": True}

app = mcp.streamable_http_app(stateless_http=True, json_response=True)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False, timeout_keep_alive=60)
"""


def _tools() -> Any:
    import anyio

    from openfunctions.core import ToolRegistry, define_tool

    async def effect(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
        await anyio.sleep(EFFECT_S)
        return {"ok": True}

    schema = {"type": "object", "properties": {"key": {"type": "string"}}}
    caps: dict[str, Any] = {
        "sleep_parallel": {"effect": "external", "parallel_safe": True},
        "sleep_keyed": {"effect": "external", "conflict_keys": ["/key"]},
        "sleep_unclassified": None,
    }
    return ToolRegistry([
        define_tool(name=name, description="Waits 200 ms (an external effect) and returns ok.", input_schema=schema,
                    handler=effect, capability=cap)
        for name, cap in caps.items()
    ])


registry = _tools() if __name__ != "__main__" else None
"""What ``openfunctions-mcp serve --module bench_lanes:registry`` serves."""


class _Server:
    def __init__(self, argv: list[str], port: int, log: Path) -> None:
        self.port = port
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
        with log.open("wb") as out:  # a file, not a pipe: an undrained pipe would stall a chatty server
            self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=out)
        wait_for_port(port, self.proc, timeout=60, output=log.read_text)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def _rate(port: int, clients: int, tool: str, keys: str, seconds: float) -> tuple[float, int, float]:
    def arguments(n: int, i: int) -> dict[str, object]:
        return {"key": f"client-{n}" if keys == "distinct" else "shared"}

    load = LeanClients(port, clients, tool=tool, arguments=arguments)
    try:
        wall = await load.run(seconds=seconds)
    finally:
        load.close()
    p50 = statistics.median(load.latencies) * 1000 if load.latencies else float("nan")
    return len(load.latencies) / wall, len(load.errors), p50


async def bench(clients: list[int], seconds: float, rounds: int) -> list[list[object]]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-lanes-"))
    script = Path(sys.executable).with_name("openfunctions-mcp")
    base = [str(script)] if script.exists() else [sys.executable, "-m", "openfunctions.servers"]

    def ours(name: str, *extra: str) -> _Server:
        port = free_port()
        return _Server([*base, "serve", "--module", "bench_lanes:registry", "--no-example-tools", "--transport", "http",
                        "--port", str(port), "--stateless", *extra, "--data-dir", str(tmp / name), "--log-level", "warning"],
                       port, tmp / f"{name}.log")

    (tmp / "sdk.py").write_text(SDK_SERVER)
    p_sdk = free_port()
    servers = {"sdk": _Server([sys.executable, str(tmp / "sdk.py"), str(p_sdk)], p_sdk, tmp / "sdk.log")}
    rows: list[list[object]] = []
    try:
        servers["ours"] = ours("ours")
        servers["ours_nj"] = ours("ours-no-journal", "--no-journal")
        interleaved = (("SDK MCPServer", "sdk", "sleep_effect"),
                       ("ours, parallel_safe", "ours", "sleep_parallel"),
                       ("ours, distinct keys", "ours", "sleep_keyed"),
                       ("ours, parallel_safe, --no-journal", "ours_nj", "sleep_parallel"),
                       ("ours, distinct keys, --no-journal", "ours_nj", "sleep_keyed"))
        for n in clients:
            for server in servers.values():  # warm up: imports, first connections
                await _rate(server.port, n, "sleep_effect" if server is servers["sdk"] else "sleep_parallel", "distinct", 0.5)
            rates: dict[str, list[float]] = {label: [] for label, _, _ in interleaved}
            p50s: dict[str, list[float]] = {label: [] for label, _, _ in interleaved}
            errors: dict[str, int] = dict.fromkeys(rates, 0)
            for _ in range(rounds):
                for label, server_name, tool in interleaved:
                    rate, errs, p50 = await _rate(servers[server_name].port, n, tool, "distinct", seconds)
                    rates[label].append(rate)
                    p50s[label].append(p50)
                    errors[label] += errs
            sdk_rates = rates["SDK MCPServer"]
            for label, rs in rates.items():
                ratio = statistics.median(r / s for r, s in zip(rs, sdk_rates, strict=True))
                rows.append([n, label, f"{statistics.median(rs):.1f}", f"{ratio:.2f}x",
                             f"{statistics.median(p50s[label]):.0f}", errors[label]])
            for label, tool, keys in (("ours, one shared key", "sleep_keyed", "shared"),
                                      ("ours, unclassified", "sleep_unclassified", "distinct")):
                rate, errs, p50 = await _rate(servers["ours"].port, n, tool, keys, seconds)
                rows.append([n, label, f"{rate:.1f}", f"{rate / statistics.median(sdk_rates):.2f}x", f"{p50:.0f}", errs])
            for r in rows[-len(interleaved) - 2:]:
                print(" | ".join(str(c) for c in r), flush=True)
    finally:
        for server in servers.values():
            server.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="load per row (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds of the SDK-matching rows (default: %(default)s)")
    ap.add_argument("--clients", default="10,100", help="comma-separated client counts (default: %(default)s)")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/PERFORMANCE.md alone")
    args = ap.parse_args(argv)
    clients = [int(c) for c in args.clients.split(",")]
    rows = asyncio.run(bench(clients, args.seconds, args.rounds))
    body = table(["clients", "server", "calls/s", "vs SDK", "latency p50 (ms)", "errors"], rows)
    print(body)
    if not args.no_write:
        note = (
            f"A tool that waits {EFFECT_S * 1000:.0f} ms (an external effect), raw keep-alive HTTP clients "
            "(`load_http.LeanClients`), our server (`serve --transport http --stateless`, journal on) vs the SDK's "
            "`MCPServer` (stateless JSON, uvicorn) in the same run. `vs SDK`: the median of per-round ratios for the "
            "interleaved rows, else against the SDK's median. One shared key and unclassified are one call at a time by "
            f"design (about 1 / {EFFECT_S * 1000:.0f} ms = {1 / EFFECT_S:.0f} calls/s); a serialized row runs until the "
            "calls its clients started finish. What runs with what: docs/SERVERS.md, \"What runs concurrently with what\".\n\n"
        )
        cmd = "python bench/bench_lanes.py" + "".join(
            f" --{k} {v}" for k, v in (("seconds", args.seconds), ("rounds", args.rounds), ("clients", args.clients))
            if v != ap.get_default(k))
        write_section("lanes", "Scoped write barriers: calls/s vs the SDK's MCPServer", note + body, cmd)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
