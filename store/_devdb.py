"""``openfunctions-mcp db start|stop|status``: a local PostgreSQL with pgvector for development.

    db start  [--dir D]   initialise D the first time, start the server, print its DSN (exit 0)
    db status [--dir D]   "running" and the DSN (exit 0), or "not running" (exit 1)
    db stop   [--dir D]   stop it (a fast shutdown: open sessions are disconnected) and wait (exit 0)

``db status`` is the local server's only with ``--dir``, or when no database is named (no
``--database``, no ``$OPENFUNCTIONS_DATABASE_URL``); given one, it reports that database's schema
versions (store/db_cli.py). Exit 2: the server cannot be used (pgserver missing, a start that failed).

The server comes from the PyPI package ``pgserver`` (PostgreSQL 16 with the ``vector`` extension,
binaries inside the wheel), the optional extra ``devdb``: ``pip install 'openfunctions-mcp[devdb]'``.
Its data directory defaults to ``<data-dir>/postgres`` (the per-user data dir every command uses,
``$OPENFUNCTIONS_MCP_DATA_DIR`` overriding it). It listens on a Unix socket only, no TCP port, so
nothing off this machine reaches it, and trusts local connections; the DSN names the socket's
folder: ``postgresql://postgres:@/postgres?host=/path/to/socket-dir``. It keeps running after
``db start`` returns (its own process, ``pg_ctl``-started) until ``db stop`` or a reboot, and the
data stays in the directory across restarts. For development and tests, not production: use a
managed PostgreSQL there (docs/SCALING.md).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path
from typing import Any

from openfunctions.core.errors import OpenFunctionsError

EXTRA_HINT = "pip install 'openfunctions-mcp[devdb]'"
#: How long ``db stop`` waits for the server to exit after asking it to.
STOP_WAIT_S = 60.0


class DevDatabaseUnavailable(OpenFunctionsError):
    """The local development database cannot be started or inspected (pgserver missing, start failed)."""

    code = "devdb_unavailable"


def default_dir() -> Path:
    from openfunctions.core.files import default_data_dir

    return Path(default_data_dir()) / "postgres"


def _pgserver() -> Any:
    try:
        with warnings.catch_warnings():  # platformdirs warns at import when $XDG_RUNTIME_DIR is unset: not ours to say
            warnings.simplefilter("ignore")
            import pgserver
            from pgserver.utils import PostmasterInfo
    except ImportError as exc:
        raise DevDatabaseUnavailable(f"a local PostgreSQL needs the pgserver package, which is not installed "
                                     f"({exc}): {EXTRA_HINT}") from None
    return pgserver, PostmasterInfo


def running_dsn(data_dir: Path) -> str | None:
    """The DSN of the server running on ``data_dir``, or ``None`` when none is."""
    _, info_cls = _pgserver()
    try:
        info = info_cls.read_from_pgdata(data_dir.expanduser().resolve())
    except (OSError, ValueError, AssertionError):  # no readable postmaster.pid: nothing runs there
        return None
    if info is None or not info.is_running() or info.status != "ready":
        return None
    return str(info.get_uri())


def start(data_dir: Path) -> str:
    """Start (initialising it the first time) the server on ``data_dir``; its DSN. Already running: its DSN."""
    pgserver, _ = _pgserver()
    data_dir = data_dir.expanduser().resolve()
    dsn = running_dsn(data_dir)
    if dsn is not None:
        return dsn
    try:
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        # pgserver caches a handle per directory for the process's life; one whose server was stopped since
        # would be handed back without starting anything (a long-lived caller: tests, a notebook)
        getattr(pgserver.PostgresServer, "_instances", {}).pop(data_dir, None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pgserver.get_server(data_dir, cleanup_mode=None)  # None: it outlives this process
        return str(server.get_uri())
    except Exception as exc:  # initdb/pg_ctl failures surface as CalledProcessError, a bad dir as OSError
        log = data_dir / "log"
        raise DevDatabaseUnavailable(f"PostgreSQL did not start in {data_dir}: {type(exc).__name__}: "
                                     f"{str(exc)[:300]} (its log: {log})") from None


def stop(data_dir: Path) -> bool:
    """Stop the server on ``data_dir`` and wait for it to exit; ``False`` when none was running."""
    import signal

    _, info_cls = _pgserver()
    data_dir = data_dir.expanduser().resolve()
    if running_dsn(data_dir) is None:
        return False
    info = info_cls.read_from_pgdata(data_dir)
    process = info.process
    try:
        process.send_signal(signal.SIGINT)  # PostgreSQL's "fast" shutdown: sessions disconnected, data flushed
        process.wait(STOP_WAIT_S)
    except Exception as exc:  # psutil.NoSuchProcess: it ended meanwhile; TimeoutExpired: it did not
        if process.is_running():
            raise DevDatabaseUnavailable(f"PostgreSQL in {data_dir} did not stop within {STOP_WAIT_S:g} s "
                                         f"({type(exc).__name__}); its log: {data_dir / 'log'}") from None
    return True


def add_commands(sub: Any, status: argparse.ArgumentParser) -> None:
    """Add ``db start`` and ``db stop`` to the ``db`` subparsers, and the local server to ``db status``."""
    def dir_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("--dir", dest="devdb_dir", type=Path, default=None, metavar="DIR",
                       help="the local server's data directory (default: <data-dir>/postgres)")

    p = sub.add_parser("start", help="start a local PostgreSQL with pgvector (the devdb extra) and print its DSN")
    dir_arg(p)
    p.set_defaults(func=_cmd_start)
    p = sub.add_parser("stop", help="stop the local PostgreSQL that `db start` started")
    dir_arg(p)
    p.set_defaults(func=_cmd_stop)
    dir_arg(status)
    schema_status = status.get_default("func")

    def _status(args: argparse.Namespace) -> int:
        if args.devdb_dir is None and args.database:
            return int(schema_status(args))
        return _cmd_status(args)

    status.set_defaults(func=_status)


def _dir(args: argparse.Namespace) -> Path:
    return (args.devdb_dir or default_dir()).expanduser()


def _fail(command: str, exc: OpenFunctionsError) -> int:
    print(f"openfunctions-mcp db {command}: {exc.message}", file=sys.stderr)
    return 2


def _cmd_start(args: argparse.Namespace) -> int:
    try:
        dsn = start(_dir(args))
    except OpenFunctionsError as exc:
        return _fail("start", exc)
    print(dsn)
    print(f"local PostgreSQL running (data: {_dir(args).resolve()}); use it with\n"
          f"  export OPENFUNCTIONS_DATABASE_URL='{dsn}'\n"
          f"  openfunctions-mcp db migrate\n"
          f"stop it with `openfunctions-mcp db stop`", file=sys.stderr)
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    try:
        stopped = stop(_dir(args))
    except OpenFunctionsError as exc:
        return _fail("stop", exc)
    print(f"local PostgreSQL {'stopped' if stopped else 'was not running'} (data: {_dir(args).resolve()})")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    try:
        dsn = running_dsn(_dir(args))
    except OpenFunctionsError as exc:
        return _fail("status", exc)
    if dsn is None:
        print(f"local PostgreSQL not running (data: {_dir(args).resolve()}); start it with `openfunctions-mcp db start`")
        return 1
    print(f"local PostgreSQL running: {dsn} (data: {_dir(args).resolve()})")
    return 0


__all__ = ["DevDatabaseUnavailable", "add_commands", "default_dir", "running_dsn", "start", "stop"]
