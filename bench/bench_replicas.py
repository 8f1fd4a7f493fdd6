"""Calls/s of N `serve --stateless --database` replicas on one PostgreSQL, vs one file-journal server.

    .venv/bin/python bench/bench_replicas.py [--replicas 1,2,3] [--procs 2] [--clients 16] [--seconds 4]
                                             [--rounds 2] [--write] [--out FILE] [--database DSN]

The load: ``--procs`` processes, each with ``--clients`` raw HTTP/1.1 keep-alive connections (the lean
client of bench/load_http.py: no SDK, each a loop of stateless streamable-HTTP ``tools/call``), the
connections spread round robin over the replicas (connection i goes to replica i mod N), so no balancer
sits in the path. All load processes start together (one event), measure the same window (after a
``--warmup``), and count the calls whose reply came back inside it.

Two tools (bench/_replica_tools.py): ``ps_read``, a declared parallel-safe read (one receipt journaled
per call, calls of one process side by side), and ``noop``, an unclassified call (a registry-wide
barrier in its process: one at a time, a start and a receipt journaled). Modes: one file-journal server
(the single-machine peer) and PostgreSQL with each replica count; every replica appends to its own
journal stream. Modes are interleaved round by round; medians of the rounds. At the end the database's
journal is verified (every stream's chain, one receipt per call) and the result printed.

On a machine with fewer cores than replicas + PostgreSQL + load processes, read the figures as what the
machine does, not as a scaling curve: every process shares the same cores.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from _pg import pg_server  # noqa: E402

from bench._report import table, write_section  # noqa: E402
from bench.load_http import _ok, _read_response, request_bytes  # noqa: E402
from tests._net import free_port, wait_for_port  # noqa: E402

TOOLS = ("ps_read", "noop")
FILE_MODE = "file journal, 1 server"


def _mode_name(n: int) -> str:
    return f"PostgreSQL, {n} replica{'s' if n != 1 else ''}"


# -- the load generator (one process) -------------------------------------------------------------------------


async def _worker_main(ports: list[int], offset: int, clients: int, tool: str, warmup: float, seconds: float,
                       ready: mp.Queue, go: mp.Event) -> tuple[int, int, str]:
    conns = []
    for i in range(clients):
        port = ports[(offset + i) % len(ports)]
        conns.append((port, *await asyncio.open_connection("127.0.0.1", port)))
    ready.put(os.getpid())
    await asyncio.get_running_loop().run_in_executor(None, go.wait)
    start = time.monotonic()
    lo, hi = start + warmup, start + warmup + seconds
    counted = errors = 0
    last_error = ""

    async def loop(n: int, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal counted, errors, last_error
        i = 0
        while time.monotonic() < hi:
            i += 1
            writer.write(request_bytes(port, tool, {"n": i}, i))
            try:
                status, body = await _read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                errors += 1
                last_error = type(exc).__name__
                return
            if status != 200 or not _ok(body):
                errors += 1
                last_error = f"HTTP {status}: {body[:120]!r}"
                continue
            if lo <= time.monotonic() <= hi:
                counted += 1

    await asyncio.gather(*(loop(n, port, r, w) for n, (port, r, w) in enumerate(conns)))
    for _, _, w in conns:
        w.close()
    return counted, errors, last_error


def _worker(ports: list[int], offset: int, clients: int, tool: str, warmup: float, seconds: float,
            ready: mp.Queue, go: mp.Event, out: mp.Queue) -> None:
    try:
        import uvloop  # a leaner loop for the load, when installed

        run = uvloop.run
    except ImportError:
        run = asyncio.run
    try:
        out.put(run(_worker_main(ports, offset, clients, tool, warmup, seconds, ready, go)))
    except BaseException as exc:  # noqa: BLE001 (reported by the parent)
        ready.put(os.getpid())
        out.put((0, 1, f"load process failed: {type(exc).__name__}: {exc}"))


def drive(ports: list[int], tool: str, procs: int, clients: int, warmup: float, seconds: float) -> tuple[float, int, str]:
    """calls/s over the window, errors, the last error (``procs`` x ``clients`` connections, round robin)."""
    ctx = mp.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    workers = [ctx.Process(target=_worker, args=(ports, p * clients, clients, tool, warmup, seconds, ready, go, out),
                           daemon=True) for p in range(procs)]
    for w in workers:
        w.start()
    for _ in workers:
        ready.get(timeout=120)
    go.set()
    results = [out.get(timeout=warmup + seconds + 120) for _ in workers]
    for w in workers:
        w.join(30)
    calls = sum(r[0] for r in results)
    return calls / seconds, sum(r[1] for r in results), next((r[2] for r in results if r[2]), "")


# -- servers ---------------------------------------------------------------------------------------------------


def start_servers(dsn: str | None, n: int, root: Path) -> list[tuple[int, subprocess.Popen, Path]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p),
               PYTHONUNBUFFERED="1")
    env.pop("OPENFUNCTIONS_DATABASE_URL", None)
    started = []
    for i in range(n):
        port = free_port()
        data = root / f"r{i}-{time.monotonic_ns()}"
        log = data.with_suffix(".log")
        argv = [sys.executable, "-m", "openfunctions.servers", "serve", "--transport", "http", "--stateless",
                "--port", str(port), "--module", "_replica_tools:registry", "--no-example-tools",
                "--data-dir", str(data), "--max-connections", "5000", "--keep-alive-timeout", "120",
                *(["--database", dsn] if dsn else [])]
        with open(log, "wb") as err:
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        started.append((port, proc, log))
    for port, proc, log in started:
        try:
            wait_for_port(port, proc, timeout=120)
        except BaseException:
            stop_servers(started)
            raise RuntimeError(f"a server did not start: {log.read_text()[-2000:]}") from None
    return started


def stop_servers(started: list[tuple[int, subprocess.Popen, Path]]) -> None:
    for _, proc, _ in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for _, proc, _ in started:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", default="1,2,3", help="replica counts, comma-separated (default 1,2,3)")
    ap.add_argument("--procs", type=int, default=2, help="load processes (default 2)")
    ap.add_argument("--clients", type=int, default=16, help="keep-alive connections per load process (default 16)")
    ap.add_argument("--seconds", type=float, default=4.0, help="measured window per cell (default 4)")
    ap.add_argument("--warmup", type=float, default=1.0, help="seconds of load before the window (default 1)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds, modes interleaved (default 2)")
    ap.add_argument("--tools", default=",".join(TOOLS), help=f"tools to drive (default {','.join(TOOLS)})")
    ap.add_argument("--no-file-peer", action="store_true", help="skip the file-journal server")
    ap.add_argument("--database", help="an existing PostgreSQL (default: a private one from pgserver)")
    ap.add_argument("--write", action="store_true", help="write the table into docs/PERFORMANCE.md")
    ap.add_argument("--out", type=Path, help="also write the markdown (table and notes) to this file")
    args = ap.parse_args()
    counts = [int(x) for x in args.replicas.split(",") if x.strip()]
    tools = [t for t in args.tools.split(",") if t]
    if not counts or min(counts) < 1 or 1 not in counts:
        sys.exit("--replicas needs positive counts including 1 (the ratios are against 1 replica)")

    from openfunctions.store import migrate_database, verify_pg_journal

    root = Path(tempfile.mkdtemp(prefix="ofrep-", dir="/tmp"))
    os.chmod(root, 0o700)
    try:
        with pg_server(args.database) as dsn:
            asyncio.run(migrate_database(dsn))
            modes: dict[str, tuple[str | None, int]] = {} if args.no_file_peer else {FILE_MODE: (None, 1)}
            modes.update({_mode_name(n): (dsn, n) for n in counts})
            got: dict[tuple[str, str], list[float]] = {(m, t): [] for m in modes for t in tools}
            errors = 0
            for rnd in range(args.rounds):
                for name, (d, n) in modes.items():
                    servers = start_servers(d, n, root)
                    try:
                        for tool in tools:
                            rate, errs, last = drive([p for p, _, _ in servers], tool, args.procs, args.clients,
                                                     args.warmup, args.seconds)
                            got[(name, tool)].append(rate)
                            errors += errs
                            print(f"round {rnd + 1} {name} {tool}: {rate:,.0f} calls/s"
                                  + (f" ({errs} errors, last: {last})" if errs else ""), file=sys.stderr, flush=True)
                    finally:
                        stop_servers(servers)
            report = verify_pg_journal(dsn, "tools")
        base = {t: statistics.median(got[(_mode_name(1), t)]) for t in tools}
        headers = ["mode"] + [h for t in tools for h in (f"`{t}` calls/s (median of {args.rounds})",
                                                          f"`{t}` vs 1 replica")]
        rows = [[name] + [c for t in tools for c in (f"{statistics.median(got[(name, t)]):,.0f}",
                                                    f"{statistics.median(got[(name, t)]) / base[t]:.2f}x")]
                for name in modes]
        load = os.getloadavg()
        body = (f"Load: {args.procs} processes x {args.clients} keep-alive connections, round robin over the "
                f"replicas, {args.warmup:g} s warm-up + {args.seconds:g} s measured per cell, {args.rounds} "
                f"rounds; {os.cpu_count()} cores, load average at the end {load[0]:.1f}. "
                f"Errors: {errors}. Journal after the run: "
                + (f"verified, {report.records:,} records in {report.streams} streams"
                   if report.ok else f"{len(report.problems)} problem(s): {report.problems[:3]}")
                + f". The replicas, PostgreSQL and the load processes share this machine's {os.cpu_count()} cores: "
                "where they outnumber the cores, read the ratios as what this machine does, not as a scaling "
                "curve.\n\n" + table(headers, rows) + "\n")
        print(body)
        shown, skip = [], False  # the command as rerun: without where this run wrote its output
        for a in sys.argv[1:]:
            if skip or a == "--write":
                skip = False
                continue
            if a == "--out":
                skip = True
                continue
            if not a.startswith("--out="):
                shown.append(a)
        command = " ".join(["python bench/bench_replicas.py", *shown])
        if args.out:
            args.out.write_text(f"Command: `{command}`\n\n{body}")
        if args.write:
            write_section("replicas", "Replicas: calls/s of N `serve --database` replicas vs one file-journal "
                          "server (bench/bench_replicas.py)", body, command)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
