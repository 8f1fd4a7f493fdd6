"""``openfunctions-mcp db``: the PostgreSQL schema and journals that server replicas share.

- ``db migrate``: bring every component's schema to this release's version
  (versioned migrations, each component's list beside the module that writes
  its rows, found through ``core.postgres.COMPONENTS``; safe to run from several machines at
  once: an advisory lock makes the others wait and then find the work done).
  ``serve --database URL`` never migrates: it refuses a schema older or newer
  than its code and names both versions.
- ``db status``: the schema version found and the one this code needs, per
  component (``journal``, ``tasks``, ..., the registry ``core.postgres.COMPONENTS``).
- ``db verify [--journal NAME]``: what ``journal verify`` checks in a file
  (seq contiguous from 1, every checksum, the chain), for every stream (one
  per server instance that appended) of each execution journal in the
  database, and one receipt per call across a journal's streams; each work space's attempt
  records (seq contiguous, generations never going back: the lease fence held),
  and each workflow run space's rows (seq contiguous, time and data well-formed,
  every row folding into its run), and each pgvector RAG index's chunk rows
  (each document's all there, none without its document).
  Exit 0 valid, 1 a problem, 2 unusable.

The URL comes from ``--database`` or ``$OPENFUNCTIONS_DATABASE_URL``. See docs/SCALING.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from openfunctions.core import database_url_from_env

HELP = "migrate, check and verify the PostgreSQL database that server replicas share"


def add_commands(subparsers: Any) -> argparse.ArgumentParser:
    db: argparse.ArgumentParser = subparsers.add_parser("db", help=HELP, description=__doc__.split("\n\n")[0])
    sub = db.add_subparsers(dest="db_command", metavar="{migrate,status,verify,start,stop}")
    sub.required = True

    def url_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--database", metavar="URL", default=database_url_from_env(),
                       help="postgresql://user:pass@host/db (default: $OPENFUNCTIONS_DATABASE_URL)")

    m = sub.add_parser("migrate", help="apply the schema migrations this release knows")
    url_arg(m)
    m.set_defaults(func=_cmd_migrate)
    s = sub.add_parser("status", help="print the schema version found and the one this code needs (no database "
                                      "named, or --dir: whether the local `db start` server runs, and its DSN)")
    url_arg(s)
    s.set_defaults(func=_cmd_status)
    v = sub.add_parser("verify", help="check every execution journal stream's seq, checksums and chain")
    url_arg(v)
    v.add_argument("--journal", metavar="NAME", help="only this journal (a server profile: tools, work, ...)")
    v.set_defaults(func=_cmd_verify)
    from ._devdb import add_commands as add_devdb  # db start|stop, and db status of that local server (_devdb.py)

    add_devdb(sub, status=s)
    return db


def _url(args: argparse.Namespace) -> str | None:
    if not args.database:
        print("openfunctions-mcp db: no database: pass --database postgresql://... or set "
              "$OPENFUNCTIONS_DATABASE_URL", file=sys.stderr)
        return None
    return str(args.database)


def _cmd_migrate(args: argparse.Namespace) -> int:
    import asyncio

    from openfunctions.core import redact_dsn
    from openfunctions.core.errors import OpenFunctionsError
    from openfunctions.core.postgres import migrate_components

    url = _url(args)
    if url is None:
        return 2
    try:
        done = asyncio.run(migrate_components(url))
    except OpenFunctionsError as exc:
        print(f"openfunctions-mcp db migrate: {exc.message}", file=sys.stderr)
        return 2
    for component, (before, after) in done.items():
        if before == after:
            print(f"{redact_dsn(url)}: {component} schema already at version {after}; nothing to do")
        else:
            print(f"{redact_dsn(url)}: {component} schema migrated from version {before} to {after}")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    import asyncio

    from openfunctions.core.postgres import COMPONENTS, migrations_of, schema_version

    from ._pg import _psycopg, redact_dsn

    url = _url(args)
    if url is None:
        return 2
    psycopg, _ = _psycopg()
    components = [c.name for c in COMPONENTS]
    at_open = {c.name for c in COMPONENTS if c.at_open}

    async def found() -> list[int]:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            return [await schema_version(conn, c) for c in components]

    try:
        versions = asyncio.run(found())
    except psycopg.Error as exc:
        print(f"openfunctions-mcp db status: cannot read {redact_dsn(url)}: {exc}", file=sys.stderr)
        return 2
    current = True
    for component, have in zip(components, versions, strict=True):
        need = len(migrations_of(component))
        if have == need:
            state = "current"
        elif have > need:
            state = "newer than this code: upgrade openfunctions-mcp"
        elif component in at_open:
            state = "older: migrated when it is next opened, or by `openfunctions-mcp db migrate`"
        else:
            state = "older than this code: run `openfunctions-mcp db migrate`"
        print(f"{redact_dsn(url)}: {component} schema version {have}, this code needs {need} ({state})")
        current = current and (have == need or (component in at_open and have < need))
    return 0 if current else 1


def _cmd_verify(args: argparse.Namespace) -> int:
    url = _url(args)
    if url is None:
        return 2
    return verify_database(url, args.journal)


def verify_database(url: str, journal: str | None = None) -> int:
    """``db verify`` (also ``journal verify postgresql://...``): every journal stream (or ``journal``'s), then,
    for the whole database, each registered component's audit. Exit 0 valid, 1 a problem, 2 unusable."""
    from ._pg import _psycopg, redact_dsn
    from ._pg_journal import list_pg_journals, verify_pg_journal

    psycopg, _ = _psycopg()
    # A database nobody has migrated has no tables yet: say that and how to create them, not the server's
    # "relation does not exist".
    missing = psycopg.errors.UndefinedTable
    not_created = "its tables are not created yet: `openfunctions-mcp db migrate` creates them"
    try:
        names = [journal] if journal else list_pg_journals(url)
        reports = [verify_pg_journal(url, n) for n in names]
    except missing:
        if journal:
            print(f"openfunctions-mcp db verify: {redact_dsn(url)} has no execution journal {journal!r}: "
                  f"{not_created}", file=sys.stderr)
            return 2
        print(f"{redact_dsn(url)}: no execution journals: {not_created}")
        names, reports = [], None
    except psycopg.Error as exc:
        print(f"openfunctions-mcp db verify: cannot read {redact_dsn(url)}: {exc}", file=sys.stderr)
        return 2
    if reports == []:
        print(f"{redact_dsn(url)}: no execution journals yet")
    bad = 0
    for r in reports or []:
        if r.ok:
            print(f"journal {r.name}: ok: {r.records} records in {r.streams} stream(s) ({r.starts} starts, "
                  f"{r.receipts} receipts, {r.unsettled} start(s) of live servers not yet settled); every stream's "
                  "seq, checksums and chain verified, one receipt per call")
        else:
            bad += 1
            print(f"journal {r.name}: {len(r.problems)} problem(s):")
            for p in r.problems:
                print(f"  {p}")
    if not journal:  # every other component's own audit (the registry: core/postgres.py), e.g. work spaces
        from openfunctions.core.postgres import COMPONENTS, verifier_of

        try:
            for c in COMPONENTS:
                audit = verifier_of(c.name)
                if audit is None:
                    continue
                try:
                    bad += _report(audit(url))
                except missing:
                    print(f"{c.name}: nothing to verify: {not_created}")
        except psycopg.Error as exc:
            print(f"openfunctions-mcp db verify: cannot read {redact_dsn(url)}: {exc}", file=sys.stderr)
            return 2
    return 1 if bad else 0


def _report(audits: list[tuple[str, list[str], str]]) -> int:
    """Print each ``(subject, problems, what was checked)``; how many subjects have problems."""
    bad = 0
    for subject, problems, ok in audits:
        if problems:
            bad += 1
            print(f"{subject}: {len(problems)} problem(s):")
            for p in problems:
                print(f"  {p}")
        else:
            print(f"{subject}: ok: {ok}")
    return bad


__all__ = ["HELP", "add_commands", "verify_database"]
