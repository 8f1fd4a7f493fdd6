"""``openfunctions-mcp grant ...``: the operator's commands for issuing and revoking grants.

The server CLI calls :func:`add_commands` with its subparsers object. Each
leaf parser sets ``func(args) -> int`` (an exit code); the caller runs
``sys.exit(args.func(args))``. Output goes to stdout (it is a CLI, not the
stdio server); errors go to stderr with exit code 2 (bad input) or 1.

    grant issue --principal P --steps a,b [--paths 'src/**,docs/**'] --ttl 8h
                [--catalog FILE] [--issuer NAME] [--data-dir D] [--json]
    grant list [--json] [--all] [--principal P] [--data-dir D]
    grant revoke ID [--by NAME] [--data-dir D]

``--catalog`` checks that every step exists in that catalog and binds the
grant to the catalog's digest (an edited catalog then needs a new grant);
``--no-bind`` checks the steps without binding. The data directory defaults,
like the server's, to ``$OPENFUNCTIONS_MCP_DATA_DIR`` or else the per-user data
dir of ``openfunctions-mcp`` (platformdirs); grants live in
``<data-dir>/work/grants.journal``. With ``--database URL`` (default
``$OPENFUNCTIONS_DATABASE_URL``, like ``serve --database``) they are rows in
that PostgreSQL instead, where every server replica reads them (work's own
PostgreSQL backend, ``work/_pg.py``, work space ``"work"``: the one ``serve
--database`` uses).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from openfunctions.core import database_url_from_env
from openfunctions.core.errors import OpenFunctionsError

from ._errors import GrantNotFound
from ._grants import GrantStore, parse_ttl, utc_datetime


def redacted(url: str) -> str:
    """A database URL without its password (for messages): core's one redaction, which also hides
    ``?password=`` and ``key=value`` forms."""
    from openfunctions.core import redact_dsn

    return redact_dsn(url)


def with_database(url: str, use: Callable[[Any], Awaitable[Any]]) -> Any:
    """``use(backend)`` with the opened work backend of the database at ``url`` (closed afterwards)."""
    from ._pg import open_pg_work  # psycopg only when a database is named

    async def run() -> Any:
        backend = await open_pg_work(url)
        try:
            return await use(backend)
        finally:
            await backend.aclose()

    return anyio.run(run)


def _with_grants(args: argparse.Namespace, use: Callable[[Any], Awaitable[Any]]) -> tuple[Any, str]:
    """``(use(grants), where)`` with the grants of ``--database`` or of the data directory."""
    url = getattr(args, "grant_database", None)
    if not url:
        store = GrantStore.in_data_dir(_data_dir(args))
        return anyio.run(use, store), str(store.path)

    async def on(backend: Any) -> tuple[Any, str]:
        return await use(backend.grants), backend.grants.where

    return with_database(url, on)  # type: ignore[no-any-return]


def default_data_dir() -> Path:
    """The same default as the server CLI: ``$OPENFUNCTIONS_MCP_DATA_DIR``, else the per-user data dir."""
    import os

    env = os.environ.get("OPENFUNCTIONS_MCP_DATA_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("openfunctions-mcp", appauthor=False))


def _data_dir(args: argparse.Namespace) -> Path:
    d = getattr(args, "grant_data_dir", None) or getattr(args, "data_dir", None)
    return Path(d) if d else default_data_dir()


def _split(text: str | None) -> list[str]:
    return [s.strip() for s in (text or "").split(",") if s.strip()]


def add_commands(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``grant`` command (with ``issue``, ``list``, ``revoke``) to ``subparsers``."""
    grant: argparse.ArgumentParser = subparsers.add_parser("grant", help="issue, list and revoke work grants", description=__doc__.split("\n\n")[0])
    sub = grant.add_subparsers(dest="grant_command", metavar="{issue,list,revoke}")
    sub.required = True

    def data_dir_opt(p: argparse.ArgumentParser) -> None:

        p.add_argument("--data-dir", dest="grant_data_dir", default=None, help="data directory (default: per-user data dir)")
        p.add_argument("--database", dest="grant_database", metavar="URL", default=database_url_from_env(),
                       help="grants as rows in this PostgreSQL, shared by `serve --database` replicas "
                            "(default: $OPENFUNCTIONS_DATABASE_URL; else the data directory)")

    issue = sub.add_parser("issue", help="issue a grant to a principal")
    issue.add_argument("--principal", required=True, help="the principal (trusted-context identity) the grant authorizes")
    issue.add_argument("--steps", required=True, help="comma-separated catalog step names")
    issue.add_argument("--paths", default="", help="comma-separated glob patterns for path parameters, e.g. 'src/**'")
    issue.add_argument("--ttl", required=True, help="lifetime: 90s, 30m, 8h, 2d, 1h30m")
    issue.add_argument("--issuer", default=None, help="who issues it (default: the OS user)")
    issue.add_argument("--catalog", default=None, help="check step names against this catalog and bind to its digest")
    issue.add_argument("--no-bind", action="store_true", help="with --catalog: check steps but do not bind the digest")
    issue.add_argument("--json", action="store_true", help="print the grant as JSON")
    data_dir_opt(issue)
    issue.set_defaults(func=_cmd_issue)

    lst = sub.add_parser("list", help="list grants")
    lst.add_argument("--json", action="store_true", help="print JSON (one array)")
    lst.add_argument("--all", action="store_true", help="include expired and revoked grants")
    lst.add_argument("--principal", default=None)
    data_dir_opt(lst)
    lst.set_defaults(func=_cmd_list)

    rev = sub.add_parser("revoke", help="revoke a grant (effective at the server's next check)")
    rev.add_argument("grant_id")
    rev.add_argument("--by", default=None, help="who revokes it (default: the OS user)")
    data_dir_opt(rev)
    rev.set_defaults(func=_cmd_revoke)
    return grant


def _fail(msg: str, code: int = 2) -> int:
    print(f"openfunctions-mcp grant: error: {msg}", file=sys.stderr)
    return code


def _cmd_issue(args: argparse.Namespace) -> int:
    steps = _split(args.steps)
    paths = _split(args.paths)
    if not steps:
        return _fail("--steps names no step")
    try:
        ttl = parse_ttl(args.ttl)
    except ValueError as exc:
        return _fail(str(exc))
    digest = None
    catalog_file = args.catalog
    if not catalog_file:
        # no --catalog: check the step names against the catalog the server would load, when there is one
        from ._profile import resolve_catalog_path

        found = resolve_catalog_path(_data_dir(args), None)
        if found.exists():
            catalog_file = str(found)
            print(f"openfunctions-mcp grant: checking steps against {found} (the server's catalog; --catalog binds "
                  "the grant to it)", file=sys.stderr)
        else:
            print(f"openfunctions-mcp grant: warning: no catalog to check step names against (none at {found}; "
                  "pass --catalog FILE): steps are taken as given", file=sys.stderr)
            if not paths:
                print("openfunctions-mcp grant: warning: --paths grants no path: write_file/read_file steps "
                      "will be refused", file=sys.stderr)
    if catalog_file:
        from ._catalog import Catalog

        try:
            cat = Catalog.load(catalog_file)
            for s in steps:
                cat.step(s)
        except OpenFunctionsError as exc:
            return _fail(exc.message)
        digest = None if (args.no_bind or not args.catalog) else cat.digest
        path_steps = [s for s in steps if cat.step(s).path_params]
        if path_steps and not paths:
            print(f"openfunctions-mcp grant: warning: steps {', '.join(path_steps)} take paths, but --paths grants none; "
                  "they will be refused", file=sys.stderr)
    try:
        g, _ = _with_grants(args, lambda store: store.issue(principal=args.principal, steps=steps, paths=paths, ttl=ttl,
                                                            issuer=args.issuer, catalog_digest=digest))
    except ValueError as exc:
        return _fail(str(exc))
    except OpenFunctionsError as exc:
        return _fail(exc.message, 1)
    if args.json:
        print(json.dumps(g.describe(), sort_keys=True))
    else:
        print(g.grant_id)
        print(
            f"issued to {g.principal} by {g.issuer}: steps {', '.join(g.steps)}; paths {', '.join(g.paths) or '(none)'}; "
            f"expires {g.describe()['expires_at']}" + (f"; bound to catalog {digest}" if digest else ""),
            file=sys.stderr,
        )
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    try:
        grants, where = _with_grants(args, lambda store: store.list())
    except OpenFunctionsError as exc:
        return _fail(exc.message, 1)
    now = utc_datetime()
    if args.principal:
        grants = [g for g in grants if g.principal == args.principal]
    if not args.all:
        grants = [g for g in grants if g.active(now)]
    rows = [g.describe(now) for g in grants]
    if args.json:
        print(json.dumps(rows, sort_keys=True))
        return 0
    if not rows:
        print(f"no grants in {where}" + ("" if args.all else " (active); --all shows expired and revoked ones"))
        return 0
    for r in rows:
        print(
            f"{r['grant_id']}  {r['status']:<7}  principal={r['principal']}  steps={','.join(r['steps'])}  "
            f"paths={','.join(r['paths']) or '-'}  expires={r['expires_at']}  issuer={r['issuer']}"
        )
    return 0


def _cmd_revoke(args: argparse.Namespace) -> int:
    try:
        g, _ = _with_grants(args, lambda store: store.revoke(args.grant_id, by=args.by))
    except GrantNotFound as exc:
        return _fail(exc.message, 2)  # bad input: an id that was never issued here
    except OpenFunctionsError as exc:
        return _fail(exc.message, 1)
    print(f"{g.grant_id} revoked at {g.describe()['revoked_at']} by {g.revoked_by}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -m openfunctions.work.cli grant ...``) until the server CLI wires it in."""
    parser = argparse.ArgumentParser(prog="openfunctions-mcp")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["add_commands", "default_data_dir", "main", "with_database", "redacted"]
