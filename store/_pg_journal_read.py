"""Reading the PostgreSQL execution journal as one history: its streams merged by time.

Each server process appends to its own stream (``store/_pg_journal.py``), so
the journal is a set of chains, each in its own ``seq`` order. A reader that
wants one sequence (``journal tail|show --database``, the ``receipts()`` of a
recovery path) merges the streams by the record's ``time`` — the RFC 3339
UTC text of the appending process's clock, which sorts as text — keeping each
stream's own order even if a clock stepped back (a k-way merge of the
streams, not one ``ORDER BY time``). Records of two replicas within one clock
skew of each other may therefore show in either order: keep the replicas'
clocks synchronised (NTP) for a merged view that reads as it happened.

Also the ``--database`` side of ``openfunctions-mcp journal verify|tail|show``
(``core/journal/cli.py`` calls :func:`cli_verify`, :func:`cli_tail`,
:func:`cli_show`). Every read here is read-only: no registration, no lock.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import time as _time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from openfunctions.core import canonical_json
from openfunctions.core.postgres import schema_problem, schema_version_sync

from ._pg import _psycopg, redact_dsn
from ._pg_journal_schema import COMPONENT

EXIT_OK, EXIT_BAD, EXIT_UNUSABLE = 0, 1, 2
_COLUMNS = "journal, stream, seq, type, time, data, prev, chk, instance"


@dataclass(frozen=True)
class PgRecord:
    """One row of ``of_journal_records`` (``data`` as stored: canonical JSON text)."""

    journal: str
    stream: str
    seq: int
    type: str
    time: str
    data: str
    prev: str
    chk: str
    instance: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"journal": self.journal, "stream": self.stream, "seq": self.seq, "type": self.type,
                "time": self.time, "data": json.loads(self.data), "prev": self.prev, "chk": self.chk,
                "instance": self.instance}


def merge_by_time(streams: Iterable[Iterable[PgRecord]]) -> Iterator[PgRecord]:
    """The records of several streams (each in its seq order) as one sequence by time, each stream's order kept."""
    return heapq.merge(*streams, key=lambda r: (r.time, r.journal, r.stream))


def _streams(conn: Any, journal: str | None) -> list[tuple[str, str]]:
    return [(j, s) for j, s in conn.execute(
        "SELECT journal, stream FROM of_journal_streams WHERE %s::text IS NULL OR journal = %s ORDER BY journal, stream",
        (journal, journal)).fetchall()]


def _check(conn: Any, where: str) -> None:
    problem = schema_problem(COMPONENT, schema_version_sync(conn, COMPONENT), where=where)
    if problem is not None:
        raise problem


def read_records(dsn: str, journal: str | None = None, *, types: Sequence[str] | None = None) -> Iterator[PgRecord]:
    """Every record of ``journal`` (``None``: every journal), the streams merged by time (blocking; a generator).

    One server-side cursor per stream in one read-only transaction: memory
    stays flat however long the journal, and the view is one snapshot.
    """
    psycopg, _ = _psycopg()
    with psycopg.connect(dsn) as conn:
        conn.read_only = True
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ  # every stream's cursor: one snapshot
        _check(conn, redact_dsn(dsn))
        cursors = []
        for i, (j, s) in enumerate(_streams(conn, journal)):
            cur = conn.cursor(name=f"of_read_{i}")
            cur.execute(f"SELECT {_COLUMNS} FROM of_journal_records WHERE journal = %s AND stream = %s "  # noqa: S608
                        "AND (%s::text[] IS NULL OR type = ANY(%s)) ORDER BY seq",
                        (j, s, list(types) if types else None, list(types) if types else None))
            cursors.append(PgRecord(*row) for row in cur)
        yield from merge_by_time(cursors)


def last_records(conn: Any, journal: str | None, n: int) -> tuple[list[PgRecord], dict[tuple[str, str], int]]:
    """The last ``n`` records by time across the streams, and each stream's newest seq (where a follow resumes)."""
    per_stream: list[list[PgRecord]] = []
    seen: dict[tuple[str, str], int] = {}
    for j, s in _streams(conn, journal):
        rows = conn.execute(f"SELECT {_COLUMNS} FROM of_journal_records WHERE journal = %s AND stream = %s "  # noqa: S608
                            "ORDER BY seq DESC LIMIT %s", (j, s, max(n, 1))).fetchall()
        recs = [PgRecord(*r) for r in reversed(rows)]
        seen[(j, s)] = recs[-1].seq if recs else 0
        per_stream.append(recs)
    merged = list(merge_by_time(per_stream))
    return (merged[-n:] if n else []), seen


def newer_records(conn: Any, journal: str | None, seen: dict[tuple[str, str], int]) -> list[PgRecord]:
    """Records appended since ``seen`` (updated in place), new streams included, merged by time."""
    batches = []
    for j, s in _streams(conn, journal):
        after = seen.get((j, s), 0)
        rows = conn.execute(f"SELECT {_COLUMNS} FROM of_journal_records WHERE journal = %s AND stream = %s "  # noqa: S608
                            "AND seq > %s ORDER BY seq", (j, s, after)).fetchall()
        recs = [PgRecord(*r) for r in rows]
        if recs:
            seen[(j, s)] = recs[-1].seq
            batches.append(recs)
    return list(merge_by_time(batches))


def find_records(dsn: str, receipt_id: str) -> list[PgRecord]:
    """The records (start, receipt) of one call in every journal of the database, by time.

    An operator's lookup: no index by receipt id alone covers the start records (the append path keeps
    only the indexes it needs), so this reads the records table through; fine for a tool, not for a
    request path (that is :func:`openfunctions.store.settled_pg_receipts`, by index).
    """
    psycopg, _ = _psycopg()
    with psycopg.connect(dsn) as conn:
        _check(conn, redact_dsn(dsn))
        rows = conn.execute(f"SELECT {_COLUMNS} FROM of_journal_records WHERE receipt_id = %s "  # noqa: S608
                            "ORDER BY time, journal, stream, seq", (receipt_id,)).fetchall()
    return [PgRecord(*r) for r in rows]


# -- the command line's --database side (core/journal/cli.py) ------------------------------------------------


def _label(r: PgRecord) -> str:
    return f"{r.journal}/{r.stream or '-'}:{r.seq}"


def _print(r: PgRecord, as_json: bool) -> None:
    if as_json:
        print(canonical_json(r.to_dict()), flush=True)
    else:
        print(f"{r.time}\t{_label(r)}\t{r.type}\t{r.data}", flush=True)


def _unusable(args: argparse.Namespace, what: str, exc: BaseException) -> int:
    message = getattr(exc, "message", None) or f"{type(exc).__name__}: {str(exc).strip()}"
    if getattr(args, "json", False):
        print(canonical_json({"ok": False, "database": redact_dsn(args.database), "error": message}))
    else:
        print(f"journal {what}: cannot read {redact_dsn(args.database)}: {message}", file=sys.stderr)
    return EXIT_UNUSABLE


def _guard(args: argparse.Namespace, what: str, fn: Any) -> int:
    from openfunctions.core.errors import OpenFunctionsError

    psycopg, _ = _psycopg()
    try:
        return int(fn())
    except (psycopg.Error, OpenFunctionsError) as exc:
        return _unusable(args, what, exc)


def cli_verify(args: argparse.Namespace) -> int:
    """``journal verify --database URL [--journal NAME]``: every stream of every (or one) journal."""
    from ._pg_journal import list_pg_journals, verify_pg_journal

    def run() -> int:
        psycopg, _ = _psycopg()
        with psycopg.connect(args.database) as conn:
            _check(conn, redact_dsn(args.database))
        names = [args.journal] if args.journal else list_pg_journals(args.database)
        reports = [verify_pg_journal(args.database, n) for n in names]
        if args.json:
            print(canonical_json({"ok": all(r.ok for r in reports), "database": redact_dsn(args.database),
                                  "journals": [{"name": r.name, "ok": r.ok, "streams": r.streams,
                                                "records": r.records, "starts": r.starts, "receipts": r.receipts,
                                                "unsettled": r.unsettled, "problems": r.problems}
                                               for r in reports]}))
        else:
            if not reports:
                print(f"{redact_dsn(args.database)}: no execution journals yet")
            for r in reports:
                if r.ok:
                    print(f"ok: journal {r.name}: {r.records} records in {r.streams} stream(s), every stream's seq, "
                          f"checksums and chain valid, one receipt per call; {r.unsettled} start(s) not yet settled")
                else:
                    print(f"journal {r.name}: {len(r.problems)} problem(s):")
                    for p in r.problems:
                        print(f"  {p}")
        return EXIT_OK if all(r.ok for r in reports) else EXIT_BAD

    return _guard(args, "verify", run)


def cli_tail(args: argparse.Namespace) -> int:
    """``journal tail --database URL [--journal NAME] [-n N] [-f]``: the streams merged by time."""
    def run() -> int:
        if args.n < 0:
            print(f"journal tail: -n must be >= 0, got {args.n}", file=sys.stderr)
            return EXIT_UNUSABLE
        psycopg, _ = _psycopg()
        with psycopg.connect(args.database, autocommit=True) as conn:
            _check(conn, redact_dsn(args.database))
            last, seen = last_records(conn, args.journal, args.n)
            if not args.follow:
                if args.json:
                    print(canonical_json({"ok": True, "database": redact_dsn(args.database),
                                          "records": [r.to_dict() for r in last]}))
                else:
                    for r in last:
                        _print(r, False)
                return EXIT_OK
            for r in last:
                _print(r, args.json)
            interval = max(0.05, float(args.interval))
            try:
                while True:
                    _time.sleep(interval)
                    for r in newer_records(conn, args.journal, seen):
                        _print(r, args.json)
            except KeyboardInterrupt:
                return EXIT_OK

    return _guard(args, "tail", run)


def cli_show(args: argparse.Namespace) -> int:
    """``journal show RECEIPT_ID --database URL``: the call's start and receipt in whichever streams hold them."""
    def run() -> int:
        found = find_records(args.database, args.receipt_id)
        if not found:
            message = f"no record of receipt {args.receipt_id!r} in the journals at {redact_dsn(args.database)}"
            if args.json:
                print(canonical_json({"ok": False, "receipt_id": args.receipt_id, "error": message}))
            else:
                print(f"journal show: {message}", file=sys.stderr)
            return EXIT_UNUSABLE
        if args.json:
            print(canonical_json({"ok": True, "receipt_id": args.receipt_id, "records": [r.to_dict() for r in found]}))
            return EXIT_OK
        for r in found:
            print(f"{r.type} ({_label(r)}, {r.time}) in journal {r.journal!r} stream {r.stream or '(legacy)'}")
            print("  " + json.dumps(json.loads(r.data), indent=2, ensure_ascii=False, sort_keys=True)
                  .replace("\n", "\n  "))
        return EXIT_OK

    return _guard(args, "show", run)


__all__ = ["PgRecord", "cli_show", "cli_tail", "cli_verify", "find_records", "last_records", "merge_by_time",
           "newer_records", "read_records"]
