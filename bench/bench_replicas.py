"""Calls/s through haproxy: 1, 2 and 3 `serve --stateless --database` replicas vs one file-journal server.

    .venv/bin/python bench/bench_replicas.py [--seconds 8] [--rounds 2] [--workers 8]

Every mode sits behind the same haproxy (Debian's package) on 127.0.0.1 and is driven by the same
client threads (``tests/store/_replicas.py``'s ``Load``: raw streamable-HTTP tools/call of an
effectful tool, so every call journals a start and a receipt). Modes are interleaved round by round.
On a 2-core machine the replicas, PostgreSQL, haproxy and the clients all share two cores: read the
figures as what this machine does, not as a scaling curve (docs/SCALING.md says what to expect).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pg import pg_server  # noqa: E402

from openfunctions.store import migrate_database  # noqa: E402
from tests._net import free_port  # noqa: E402
from tests.store._replicas import Load, start_haproxy, start_replica, stop  # noqa: E402


def measure(dsn: str | None, replicas: int, root: Path, seconds: float, workers: int, haproxy: str) -> float:
    port = free_port()
    procs = [start_replica(dsn, root / f"r{i}-{time.monotonic_ns()}", None, "--allowed-host", f"127.0.0.1:{port}")
             for i in range(replicas)]
    lb = start_haproxy(haproxy, port, [url for url, _ in procs], root / f"haproxy-{port}.cfg")  # the tests' balancer
    try:
        load = Load(f"http://127.0.0.1:{port}/mcp", workers=workers).start()
        time.sleep(1.0)  # warm-up
        n0, t0 = len(load.seen), time.perf_counter()
        time.sleep(seconds)
        n1, t1 = len(load.seen), time.perf_counter()
        load.stop()
        if load.errors:
            print(f"  ({load.errors} failed calls)", file=sys.stderr)
        return (n1 - n0) / (t1 - t0)
    finally:
        lb.kill()
        lb.wait()
        lb.stderr.close()  # type: ignore[union-attr]
        for _, p in procs:
            stop(p)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args()
    haproxy = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if haproxy is None:
        sys.exit("haproxy is not installed (apt-get install -y haproxy)")
    root = Path(tempfile.mkdtemp(prefix="ofrep-", dir="/tmp"))
    os.chmod(root, 0o700)
    try:
        with pg_server() as dsn:
            asyncio.run(migrate_database(dsn))
            modes = {"file journal, 1 server": (None, 1), "PostgreSQL, 1 replica": (dsn, 1),
                     "PostgreSQL, 2 replicas": (dsn, 2), "PostgreSQL, 3 replicas": (dsn, 3)}
            got: dict[str, list[float]] = {m: [] for m in modes}
            for _ in range(args.rounds):
                for name, (d, n) in modes.items():
                    got[name].append(measure(d, n, root, args.seconds, args.workers, haproxy))
                    print(f"{name}: {got[name][-1]:.0f} calls/s", file=sys.stderr)
            base = statistics.median(got["file journal, 1 server"])
            print("| mode | calls/s (median) | vs file journal, 1 server |")
            print("|---|---|---|")
            for name in modes:
                m = statistics.median(got[name])
                print(f"| {name} | {m:.0f} | {m / base:.2f}x |")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
