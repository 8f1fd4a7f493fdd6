"""Per-call cost of a durable receipt in PostgreSQL: the journal backend vs raw psycopg inserts of the same rows.

    .venv/bin/python bench/bench_pg_journal.py [--calls 300] [--rounds 5]

A private PostgreSQL (pgserver, Unix socket, default settings: synchronous_commit on, fsync on) is
started for the run. Modes, interleaved round by round so machine noise hits all alike:

- ``journal 1``: ``PgExecutionJournal.on_settled(receipt)`` one call at a time (the per-call cost:
  one statement, one commit; seq, checksum and chain computed inside the transaction);
- ``raw 1``: one ``INSERT`` of the same row (same columns, seq/chk computed in Python), autocommit,
  on one psycopg connection: the floor a hand-written durable insert pays;
- ``journal 8`` / ``raw 8``: 8 concurrent callers (the journal shares commits: group commit;
  raw uses 8 connections, each inserting on its own).
- ``raw+idx 1``: the same INSERT into a table with the journal's two extra indexes (one receipt per
  call, starts by instance): what the journal's table alone costs, without its function and head row;
- ``file 1``: the file journal (core.journal.ExecutionJournal, write + fdatasync) one call at a
  time, for scale.

Prints medians per call and the ratios journal/raw in speed (raw time / journal time; target >= 0.7).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openfunctions.core import canonical_json, new_id, utc_timestamp  # noqa: E402
from openfunctions.core.journal import ExecutionJournal, recovered_receipt  # noqa: E402
from openfunctions.store import migrate_database, open_pg_journal  # noqa: E402
from openfunctions.store._pg_journal import record_chk  # noqa: E402


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


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import pgserver
    import psycopg

    root = tempfile.mkdtemp(prefix="ofpg-", dir="/tmp")
    server = pgserver.get_server(os.path.join(root, "d"), cleanup_mode="stop")
    dsn = server.get_uri()
    try:
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
        fj = await ExecutionJournal.open(Path(root) / "fj" / "bench.journal")
        raw = Raw()
        results: dict[str, list[float]] = {k: [] for k in ("journal 1", "raw 1", "raw+idx 1", "journal 8", "raw 8", "file 1")}
        for _ in range(args.rounds):
            results["journal 1"].append(await run_journal(journal, receipts(args.calls), 1))
            results["raw 1"].append(await run_raw(conns, raw, receipts(args.calls), 1))
            results["raw+idx 1"].append(await run_raw(conns, raw, receipts(args.calls), 1, "bench_raw_idx"))
            results["journal 8"].append(await run_journal(journal, receipts(args.calls), 8))
            results["raw 8"].append(await run_raw(conns, raw, receipts(args.calls), 8))
            results["file 1"].append(await run_journal(fj, receipts(args.calls), 1))
        med = {k: statistics.median(v) for k, v in results.items()}
        for k, v in med.items():
            print(f"{k:10} {v * 1e6:8.0f} us/call  {1 / v:8.0f} calls/s")
        print(f"journal/raw speed, one at a time: {med['raw 1'] / med['journal 1']:.2f}x "
              f"(vs raw with the journal's indexes: {med['raw+idx 1'] / med['journal 1']:.2f}x)")
        print(f"journal/raw speed, 8 concurrent:  {med['raw 8'] / med['journal 8']:.2f}x "
              f"(journal commits: {journal.commits} for {journal.appended} records)")
        await journal.close()
        await fj.close()
        for c in conns:
            await c.close()
    finally:
        server.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
