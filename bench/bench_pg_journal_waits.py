"""Do two replicas' journal appends wait for each other? Lock waits sampled during concurrent appends.

    .venv/bin/python bench/bench_pg_journal_waits.py [--appends 300] [--rounds 2]

Two connections (two replicas) each append ``--appends`` single-record receipts as fast as they can, at
once, while a third polls ``pg_stat_activity`` for the two backends' lock waits. Peers in one run, each in
a private database of one PostgreSQL (pgserver): journal schema 2 (release 2's one head row per journal,
its own append statement ``APPEND_V2``) and schema 3 (one stream per replica, ``APPEND``). Prints, per
round, the samples taken and the lock waits seen by kind: ``transactionid`` is an append waiting for the
other replica's transaction (the head row it locked); ``extend`` is the shared table's relation extension
lock (a new page being allocated).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg  # noqa: E402
from _pg import pg_server  # noqa: E402

from openfunctions.core import canonical_json, new_id, utc_timestamp  # noqa: E402
from openfunctions.store import apply_migrations  # noqa: E402
from openfunctions.store._migrations import MIGRATIONS  # noqa: E402
from openfunctions.store._pg_journal import link  # noqa: E402
from openfunctions.store._pg_journal_schema import APPEND, APPEND_V2  # noqa: E402
from tests.store._journal_backends import private_database  # noqa: E402

HEADER = canonical_json({"format": "openfunctions.journal", "version": 2, "kind": "execution"})


async def _setup(dsn: str, schema: int) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
        await apply_migrations(c, "journal", MIGRATIONS[:schema])
        if schema == 2:
            await c.execute("INSERT INTO of_journals (name, header, last_seq, last_link) VALUES ('t', %s, 0, %s)",
                            (HEADER, link(HEADER)))
            return
        await c.execute("INSERT INTO of_journals (name, header) VALUES ('t', %s)", (HEADER,))
        for stream in ("a", "b"):
            await c.execute("INSERT INTO of_journal_streams (journal, stream, header, last_seq, last_link) "
                            "VALUES ('t', %s, %s, 0, %s)", (stream, HEADER, link(HEADER)))


def measure(dsn: str, schema: int, appends: int) -> tuple[int, Counter[str]]:
    asyncio.run(_setup(dsn, schema))
    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(2)]
    pids = [c.info.backend_pid for c in conns]
    stop = threading.Event()
    waits: Counter[str] = Counter()
    samples = 0

    def sample() -> None:
        nonlocal samples
        with psycopg.connect(dsn, autocommit=True) as c:
            while not stop.is_set():
                for (event,) in c.execute("SELECT wait_event FROM pg_stat_activity WHERE pid = ANY(%s) "
                                          "AND wait_event_type = 'Lock'", (pids,)).fetchall():
                    waits[event] += 1
                samples += 1

    def work(conn: psycopg.Connection, stream: str) -> None:
        for _ in range(appends):
            rid = new_id("rcpt")
            conn.execute(APPEND_V2 if schema == 2 else APPEND,
                         {"journal": "t", "stream": stream, "instance": None, "type": "receipt",
                          "time": utc_timestamp(), "data": canonical_json({"receipt_id": rid}), "receipt_id": rid})

    sampler = threading.Thread(target=sample)
    sampler.start()
    workers = [threading.Thread(target=work, args=(c, s)) for c, s in zip(conns, "ab", strict=True)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    sampler.join()
    for c in conns:
        c.close()
    return samples, waits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--appends", type=int, default=300, help="appends per replica per round (default 300)")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with pg_server() as server:
        for rnd in range(args.rounds):
            for schema in (2, 3):
                with private_database(server) as dsn:
                    samples, waits = measure(dsn, schema, args.appends)
                kinds = ", ".join(f"{k} {n}" for k, n in waits.most_common()) or "none"
                print(f"round {rnd + 1}, schema {schema}: {samples} samples; lock waits seen: {kinds}")


if __name__ == "__main__":
    main()
