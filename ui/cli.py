"""``openfunctions-mcp ui``: serve the run and journal viewer over a data directory.

    ui [--data-dir D | --database URL [--space S]] [--port 8766] [--host 127.0.0.1] [--auth-token-env VAR | --auth-token-file PATH]
       [--allowed-host HOST ...] [--allowed-origin ORIGIN ...] [--allow-resolve]

Loopback by default; another bind address needs a bearer token (open the page
as ``http://HOST:PORT/#token=...``). Prints ``ui served at URL`` on stderr once
listening. Exit codes: 0 stopped (Ctrl-C, SIGTERM), 2 bad input.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

HELP = "browse runs, receipts, attempts, tasks and conversations in a local web page"


def add_commands(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser("ui", help=HELP, description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", dest="ui_data_dir", default=None,
                   help="the data directory to show (default: $OPENFUNCTIONS_MCP_DATA_DIR or the per-user data dir)")
    p.add_argument("--database", dest="ui_database", metavar="URL", default=None,
                   help="show the PostgreSQL database server replicas share (serve --database) instead of a data dir")
    p.add_argument("--space", dest="ui_space", default="default",
                   help="with --database: the agent-run and workflow-run space (default: default)")
    p.add_argument("--port", type=int, default=8766, help="port (default 8766; 0 picks a free one)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; others need a token)")
    p.add_argument("--auth-token-env", metavar="VAR", help="require Authorization: Bearer <the value of VAR>")
    p.add_argument("--auth-token-file", metavar="PATH", help="as --auth-token-env, the token from PATH's first line")
    p.add_argument("--allowed-host", action="append", default=None, metavar="HOST",
                   help="a Host header to accept (NAME, NAME:PORT or NAME:*); repeatable")
    p.add_argument("--allowed-origin", action="append", default=None, metavar="ORIGIN",
                   help="an Origin header to accept (SCHEME://NAME[:PORT|:*]); repeatable")
    p.add_argument("--allow-resolve", action="store_true",
                   help="let the page resolve uncertain workflow steps and work operations (as the resolve commands do; "
                        "default: read-only, the page shows the commands)")
    p.set_defaults(func=cmd_ui)
    return p


def _fail(message: str) -> int:
    print(f"openfunctions-mcp ui: {message}", file=sys.stderr)
    return 2


def cmd_ui(args: argparse.Namespace) -> int:
    import anyio

    from openfunctions.core import OpenFunctionsError
    from openfunctions.core.files import default_data_dir

    from ._app import serve_ui

    if args.ui_database and args.ui_data_dir:
        return _fail("give --data-dir or --database, not both")
    data_dir = Path(args.ui_data_dir).expanduser() if args.ui_data_dir else Path(default_data_dir())
    if not args.ui_database and not data_dir.is_dir():
        return _fail(f"no data directory at {str(data_dir)!r} (give --data-dir, the directory a server, agent or "
                     "workflow wrote into)")
    try:
        token = None
        if args.auth_token_env or args.auth_token_file:
            from openfunctions.core import read_auth_token

            token = read_auth_token(env=args.auth_token_env, file=args.auth_token_file)

        if args.ui_database:
            from openfunctions.store import redact_dsn

            shown = f"database {redact_dsn(args.ui_database)}"
        else:
            shown = f"data dir {data_dir}"

        def ready(port: int) -> None:
            print(f"ui served at http://{args.host}:{port}/ ({shown}; Ctrl-C stops)", file=sys.stderr, flush=True)

        signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops like Ctrl-C: a clean exit
        anyio.run(lambda: serve_ui(None if args.ui_database else data_dir, database=args.ui_database,
                                   space=args.ui_space, port=args.port, host=args.host, token=token,
                                   allowed_hosts=args.allowed_host, allowed_origins=args.allowed_origin,
                                   allow_resolve=args.allow_resolve, ready=ready))
    except (OpenFunctionsError, ValueError) as exc:
        return _fail(getattr(exc, "message", str(exc)))
    except KeyboardInterrupt:
        return 0
    return 0


__all__ = ["HELP", "add_commands", "cmd_ui"]
