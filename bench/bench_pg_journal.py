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
- ``row fn 1``: the product's ``of_journal_append`` called directly on a connection (no flusher, no
  instance check): the database side of ``journal 1``;
- ``advisory fn 1``: an alternative append function measured for the lock choice (not the product's):
  ``pg_advisory_xact_lock`` per journal instead of the head row's ``FOR UPDATE``, and the tail read
  from the records' primary key instead of a head row that is updated on every commit;
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


ADVISORY_FN = r"""
CREATE OR REPLACE FUNCTION bench_append_advisory(p_journal text, p_instance text, p_types text[], p_times text[],
                                                 p_datas text[], p_rids text[])
RETURNS TABLE(o_idx int, o_seq bigint) LANGUAGE plpgsql AS $fn$
DECLARE
    v_seq bigint; v_link text; v_prev text; i int;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('of_journal:' || p_journal));
    SELECT seq, chk INTO v_seq, v_link FROM bench_adv WHERE journal = p_journal ORDER BY seq DESC LIMIT 1;
    IF NOT FOUND THEN v_seq := 0; v_link := repeat('0', 32); END IF;
    FOR i IN 1 .. coalesce(array_length(p_types, 1), 0) LOOP
        IF p_types[i] = 'receipt' AND EXISTS (SELECT 1 FROM bench_adv r WHERE r.journal = p_journal
                AND r.receipt_id = p_rids[i] AND r.type = 'receipt') THEN
            o_idx := i; o_seq := NULL; RETURN NEXT; CONTINUE;
        END IF;
        v_seq := v_seq + 1; v_prev := v_link;
        v_link := left(encode(sha256(convert_to('{"data":' || p_datas[i] || ',"prev":"' || v_prev || '","seq":'
                  || v_seq::text || ',"time":' || to_json(p_times[i])::text || ',"type":' || to_json(p_types[i])::text
                  || '}', 'UTF8')), 'hex'), 32);
        INSERT INTO bench_adv (journal, seq, type, time, data, prev, chk, receipt_id, instance)
            VALUES (p_journal, v_seq, p_types[i], p_times[i], p_datas[i], v_prev, v_link, p_rids[i], p_instance);
        o_idx := i; o_seq := v_seq; RETURN NEXT;
    END LOOP;
END
$fn$
"""


async def run_fn(conn, rs, fn: str, journal: str) -> float:
    """One append function called directly (no Python journal around it): the two lock choices side by side."""
    t = time.perf_counter()
    for r in rs:
        cur = await conn.execute(f"SELECT o_idx, o_seq FROM {fn}(%s, %s, %s, %s, %s, %s)",
                                 (journal, None, ["receipt"], [utc_timestamp()], [canonical_json(r.to_dict())],
                                  [r.receipt_id]))
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
            await c.execute("CREATE TABLE IF NOT EXISTS bench_adv (LIKE bench_raw_idx INCLUDING ALL)")
            await c.execute("CREATE UNIQUE INDEX IF NOT EXISTS bench_raw_idx_r ON bench_raw_idx (journal, receipt_id) "
                            "WHERE type = 'receipt'")
            await c.execute("CREATE INDEX IF NOT EXISTS bench_raw_idx_s ON bench_raw_idx (journal, instance, receipt_id) "
                            "WHERE type = 'start'")
            await c.execute("CREATE UNIQUE INDEX IF NOT EXISTS bench_adv_r ON bench_adv (journal, receipt_id) "
                            "WHERE type = 'receipt'")
            await c.execute(ADVISORY_FN)
        conns = [await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(8)]
        journal = await open_pg_journal(dsn, "bench", max_connections=8)
        fn_journal = await open_pg_journal(dsn, "fn")  # creates the "fn" journal row for the direct calls
        await fn_journal.close()
        fj = await ExecutionJournal.open(Path(root) / "fj" / "bench.journal")
        raw = Raw()
        results: dict[str, list[float]] = {k: [] for k in ("journal 1", "row fn 1", "advisory fn 1", "raw 1", "raw+idx 1", "journal 8", "raw 8", "file 1")}
        for _ in range(args.rounds):
            results["journal 1"].append(await run_journal(journal, receipts(args.calls), 1))
            results["row fn 1"].append(await run_fn(conns[0], receipts(args.calls), "of_journal_append", "fn"))
            results["advisory fn 1"].append(await run_fn(conns[0], receipts(args.calls), "bench_append_advisory", "adv"))
            results["raw 1"].append(await run_raw(conns, raw, receipts(args.calls), 1))
            results["raw+idx 1"].append(await run_raw(conns, raw, receipts(args.calls), 1, "bench_raw_idx"))
            results["journal 8"].append(await run_journal(journal, receipts(args.calls), 8))
            results["raw 8"].append(await run_raw(conns, raw, receipts(args.calls), 8))
            results["file 1"].append(await run_journal(fj, receipts(args.calls), 1))
        med = {k: statistics.median(v) for k, v in results.items()}
        for k, v in med.items():
            print(f"{k:10} {v * 1e6:8.0f} us/call  {1 / v:8.0f} calls/s")
        print(f"journal/raw speed, one at a time: {med['raw 1'] / med['journal 1']:.2f}x "
              f"(vs raw with the journal's indexes: {med['raw+idx 1'] / med['journal 1']:.2f}x); "
              f"row-lock fn / raw: {med['raw 1'] / med['row fn 1']:.2f}x; "
              f"advisory-lock fn / raw: {med['raw 1'] / med['advisory fn 1']:.2f}x")
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
