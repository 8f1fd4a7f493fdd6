"""``openfunctions-mcp journal``: the core's journal commands, with the execution journals kept in PostgreSQL.

The core's ``journal`` group (:mod:`openfunctions.core.journal.cli`) reads
journal files; the journals ``serve --database URL`` replicas share are this
package's rows, so this package supplies their reader: ``journal
tail|show|verify --database URL`` (every replica's stream, merged by time:
``store/_pg_journal_read.py``) and ``journal verify postgresql://...`` (what
``db verify`` checks). The server CLI adds the group from here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from openfunctions.core.journal import cli as _files

EXIT_UNREADABLE = _files.EXIT_UNREADABLE


class PgJournals:
    """Reads the execution journals of a PostgreSQL database for the ``journal`` commands."""

    def run(self, command: str, args: argparse.Namespace) -> int:
        try:
            from . import _pg_journal_read as reader
        except ImportError as exc:
            print(f"journal {command} --database: the PostgreSQL reader is unavailable ({exc}); install "
                  "openfunctions-mcp[postgres]", file=sys.stderr)
            return EXIT_UNREADABLE
        return int(getattr(reader, f"cli_{command}")(args))

    def verify_database(self, url: str, journal: str | None) -> int:
        from .db_cli import verify_database

        return int(verify_database(url, journal))


def add_commands(subparsers: Any) -> None:
    """Add the ``journal`` command group, database journals included."""
    _files.add_commands(subparsers, database=PgJournals())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m openfunctions.store.journal_cli")
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["journal", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["PgJournals", "add_commands", "main"]
