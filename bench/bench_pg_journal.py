"""Per-call cost of a durable receipt in PostgreSQL: the journal backend vs raw psycopg inserts of the same rows.

    .venv/bin/python bench/bench_pg_journal.py [--calls 50] [--rounds 30]

A private PostgreSQL (pgserver, Unix socket, default settings: synchronous_commit on, fsync on) is
started for the run. Modes, interleaved round by round (each round in a new random order, so a burst
of load on a shared machine hits all modes alike):

- ``journal 1``: ``PgExecutionJournal.on_settled(receipt)`` one call at a time (the per-call cost:
  one statement, one commit; seq, checksum and chain computed inside the transaction);
- ``raw 1``: one ``INSERT`` of the same row (same columns, seq/chk computed in Python), autocommit,
  on one psycopg connection: the floor a hand-written durable insert pays;
- ``journal 8`` / ``raw 8``: 8 concurrent callers (the journal shares commits: group commit;
  raw uses 8 connections, each inserting on its own).
- ``raw+idx 1``: the same INSERT into a table with the journal's two extra indexes (one receipt per
  call, starts by instance): what the journal's table alone costs, without its function and head row;
- ``stmt 1``: the product's append statement (``store/_pg_journal_schema.py`` ``APPEND``) executed
  directly on a connection (no flusher, no queue): the database side of ``journal 1``;
  (Schema 3 appends to the journal's stream of one instance; the direct calls use a closed instance's stream.
  Version 1's PL/pgSQL function, once measured here as ``v1 fn 1``, wrote the head columns schema 3 moved
  to ``of_journal_streams`` and cannot run on it.)
- ``file 1``: the file journal (core.journal.ExecutionJournal, write + fdatasync) one call at a
  time, for scale.

Prints medians per call (wall time, and CPU time of this process plus the PostgreSQL backends the mode
used, which the disk's fsync latency does not inflate) and the ratios journal/raw in speed (raw time /
journal time; target >= 0.7).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _pg import pg_server  # noqa: E402

from openfunctions.core import canonical_json, new_id, utc_timestamp  # noqa: E402
from openfunctions.core.journal import ExecutionJournal, recovered_receipt  # noqa: E402
from openfunctions.store import migrate_database, open_pg_journal  # noqa: E402
from openfunctions.store._pg_journal import record_chk  # noqa: E402
from openfunctions.store._pg_journal_schema import APPEND  # noqa: E402


def receipts(n: int) -> list:
    return [recovered_receipt({"receipt_id": new_id("rcpt"), "tool": "bench", "started_at": utc_timestamp()})
            for _ in range(n)]


async def run_journal(j, rs, conc: int) -> float:
    t = time.perf_counter()
    if conc == 1:
        for r in rs:
            await j.on_settled(r)
    else:
        it = iter(rs)

        async def worker():
            for r in it:
                await j.on_settled(r)

        await asyncio.gather(*(worker() for _ in range(conc)))
    return (time.perf_counter() - t) / len(rs)


class Raw:
    def __init__(self) -> None:
        self.seq = 0
        self.prev = "0" * 32

    def row(self, r):
        self.seq += 1
        time_ = utc_timestamp()
        data = canonical_json(r.to_dict())
        chk = record_chk(self.seq, "receipt", time_, data, self.prev)
        row = ("raw", self.seq, "receipt", time_, data, self.prev, chk, r.receipt_id, "bench")
        self.prev = chk
        return row


async def run_stmt(conn, rs, journal: str, stream: str) -> float:
    t = time.perf_counter()
    for r in rs:
        cur = await conn.execute(APPEND, {"journal": journal, "stream": stream, "instance": None, "type": "receipt",
                                          "time": utc_timestamp(), "data": canonical_json(r.to_dict()),
                                          "receipt_id": r.receipt_id})
        await cur.fetchall()
    return (time.perf_counter() - t) / len(rs)


SQL = ("INSERT INTO {table} (journal, seq, type, time, data, prev, chk, receipt_id, instance) "
       "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)")


async def run_raw(conns, raw: Raw, rs, conc: int, table: str = "bench_raw") -> float:
    t = time.perf_counter()
    it = iter(rs)
    sql = SQL.format(table=table)

    async def worker(conn):
        for r in it:
            await conn.execute(sql, raw.row(r))

    await asyncio.gather(*(worker(c) for c in conns[:conc]))
    return (time.perf_counter() - t) / len(rs)


def process_cpu(backend_pids: list[int]) -> float:
    """CPU seconds used so far by this process and the given PostgreSQL backends (local, from /proc)."""
    total = time.process_time()
    for pid in backend_pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=50, help="receipts per mode per round (default 50)")
    ap.add_argument("--rounds", type=int, default=30, help="rounds, each running every mode in a new order (default 30)")
    args = ap.parse_args()
    import psycopg

    with pg_server() as dsn, tempfile.TemporaryDirectory(prefix="ofpg-", dir="/tmp") as root:
        await migrate_database(dsn)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as c:
            await c.execute("CREATE TABLE IF NOT EXISTS bench_raw (journal text, seq bigint, type text, time text, "
                            "data text, prev text, chk text, receipt_id text, instance text, PRIMARY KEY (journal, seq))")
            await c.execute("CREATE TABLE IF NOT EXISTS bench_raw_idx (LIKE bench_raw INCLUDING ALL)")
            await c.execute("CREATE UNIQUE INDEX IF NOT EXISTS bench_raw_idx_r ON bench_raw_idx (journal, receipt_id) "
                            "WHERE type = 'receipt'")
            await c.execute("CREATE INDEX IF NOT EXISTS bench_raw_idx_s ON bench_raw_idx (journal, instance, receipt_id) "
                            "WHERE type = 'start'")
        conns = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(8)]
        journal = await open_pg_journal(dsn, "bench", max_connections=8)
        direct = await open_pg_journal(dsn, "stmt")  # a journal and a stream for the direct calls
        stmt_stream = direct.stream
        await direct.close()
        fj = await ExecutionJournal.open(Path(root) / "fj" / "bench.journal")
        raw = Raw()
        c0 = conns[0]
        modes: dict[str, tuple[Any, Any]] = {  # name -> (run(receipts) -> seconds per call, the backends it uses)
            "journal 1": (lambda rs: run_journal(journal, rs, 1), lambda: [journal._conn]),
            "stmt 1": (lambda rs: run_stmt(c0, rs, "stmt", stmt_stream), lambda: [c0]),
            "raw 1": (lambda rs: run_raw(conns, raw, rs, 1), lambda: [c0]),
            "raw+idx 1": (lambda rs: run_raw(conns, raw, rs, 1, "bench_raw_idx"), lambda: [c0]),
            "journal 8": (lambda rs: run_journal(journal, rs, 8), lambda: [journal._conn]),
            "raw 8": (lambda rs: run_raw(conns, raw, rs, 8), lambda: conns),
            "file 1": (lambda rs: run_journal(fj, rs, 1), lambda: []),
        }
        for run, _ in modes.values():  # warm up: connections made, statements prepared
            await run(receipts(10))
        results: dict[str, list[float]] = {k: [] for k in modes}
        cpu: dict[str, list[float]] = {k: [] for k in modes}
        order = list(modes)
        for _ in range(args.rounds):
            random.shuffle(order)  # each round in a new order: a burst of load on the machine hits modes alike
            for k in order:
                run, backends = modes[k]
                pids = [c.info.backend_pid for c in backends()]
                before = process_cpu(pids)
                results[k].append(await run(receipts(args.calls)))
                cpu[k].append((process_cpu(pids) - before) / args.calls)
        med = {k: statistics.median(v) for k, v in results.items()}
        for k, v in med.items():
            print(f"{k:10} {v * 1e6:8.0f} us/call  {1 / v:8.0f} calls/s   cpu (client + server) "
                  f"{statistics.median(cpu[k]) * 1e6:6.0f} us/call")
        print(f"journal/raw speed, one at a time: {med['raw 1'] / med['journal 1']:.2f}x "
              f"(vs raw with the journal's indexes: {med['raw+idx 1'] / med['journal 1']:.2f}x); "
              f"statement alone / raw: {med['raw 1'] / med['stmt 1']:.2f}x")
        print(f"journal/raw speed, 8 concurrent:  {med['raw 8'] / med['journal 8']:.2f}x "
              f"(journal commits: {journal.commits} for {journal.appended} records)")
        await journal.close()
        await fj.close()
        for c in conns:
            await c.close()


if __name__ == "__main__":
    asyncio.run(main())
