"""The ``openfunctions-mcp`` command.

With no arguments it serves the ``tools`` profile over stdio with the
per-user data directory — what an MCP host (Claude Desktop, …) launches.
Options without a command are ``serve``'s (``openfunctions-mcp --profile
work`` is ``openfunctions-mcp serve --profile work``).

Exit codes: 0 done; 1 unexpected failure; 2 bad usage or configuration
(unknown profile, unloadable --module, unreadable token, profile not in
this build, HTTP port already in use, unknown $OPENFUNCTIONS_LOG_LEVEL); 3 the data dir's journal slots are all held by other servers;
128+N (130 for SIGINT, 143 for SIGTERM) a second SIGINT/SIGTERM forced the
shutdown: calls still running were cancelled instead of finishing.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Collection, Sequence
from importlib import import_module
from pathlib import Path
from typing import Any

DEFAULT_PORT = 8000
DEFAULT_PATH = "/mcp"
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_LEVEL_ENV = "OPENFUNCTIONS_LOG_LEVEL"
# What the bare command (no sub-command, only options) means: serve. These stay top-level options.
_TOP_LEVEL_OPTIONS = {"-h", "--help", "--version"}


def _env_log_level() -> str:
    # Not validated here (argparse does not check defaults against choices): _cmd_serve does, naming the variable.
    return os.environ.get(LOG_LEVEL_ENV, "").strip().lower() or "warning"


def default_data_dir() -> Path:
    """The per-user data dir (``$OPENFUNCTIONS_MCP_DATA_DIR`` overrides it)."""
    env = os.environ.get("OPENFUNCTIONS_MCP_DATA_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_data_dir("openfunctions-mcp", appauthor=False))


def _milliseconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of milliseconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more milliseconds, got {value}")
    return value


def _add_serve_options(p: argparse.ArgumentParser) -> None:
    from ._constants import DEFAULT_MAX_MESSAGE_BYTES, JOURNAL_SYNC_MODES, PROFILES

    g = p.add_argument_group("what to serve")
    g.add_argument("--profile", choices=PROFILES, default="tools",
                   help="tools: your tools (--module / entry points) plus the example tools (not with --module "
                        "unless --example-tools); work: the of_work_* "
                        "tools; artifacts: of_artifact_read over <data-dir>/artifacts; agents: the agents, crews and "
                        "workflows --module defines, each as a tool; memory, rag: memory and retrieval tools (--store); "
                        "gateway: the upstream MCP servers of --upstreams; all: every part in this build; "
                        "conformance: the MCP conformance suite's fixtures (default: %(default)s)")
    g.add_argument("--module", action="append", default=[], metavar="PKG.MOD:ATTR",
                   help="load tools from ATTR of module PKG.MOD: a ToolRegistry, a list of tools, or a zero-arg "
                        "factory returning one (repeatable; ATTR defaults to 'registry'; a bare module without one serves its top-level @tool functions)")
    g.add_argument("--files-root", metavar="DIR",
                   help="enable the of_list_dir example tool, limited to DIR (with --module: add --example-tools)")
    examples = g.add_mutually_exclusive_group()
    examples.add_argument("--no-example-tools", action="store_true",
                          help="do not serve the example tools (of_hash_text, of_json_query, of_now)")
    examples.add_argument("--example-tools", action="store_true",
                          help="serve the example tools beside your --module tools (without it, --module serves "
                               "only yours)")
    g.add_argument("--provider", action="append", default=[], metavar="NAME:ARG",
                   help="a context provider to serve (repeatable; tools and all profiles): vault:DIR, git:DIR, "
                        "calendar:DIR-OR-FILE.ics, tasks:DIR, another installed one, or pkg.module:attr")
    g.add_argument("--skills", action="append", default=[], metavar="DIR",
                   help="a skills directory (repeatable): each *.md with name/description frontmatter becomes an "
                        "MCP prompt and a skill agents load with skill_load")
    g.add_argument("--catalog", metavar="PATH",
                   help="the work catalog (TOML) for --profile work/all (default: $OPENFUNCTIONS_WORK_CATALOG, "
                        "else <data-dir>/work/catalog.toml)")
    g.add_argument("--store", metavar="URL", default=_database_url_from_env(),
                   help="where memory and RAG keep their data: a postgresql:// URL (default: "
                        "$OPENFUNCTIONS_DATABASE_URL, else files in the data dir)")
    g.add_argument("--upstreams", metavar="JSON",
                   help="gateway: a JSON file with an 'mcpServers' object (the shape MCP hosts use) naming the "
                        "upstream MCP servers to mount as mcp__<server>__<tool>")
    g.add_argument("--max-parallel-writes", type=_positive_count, default=None, metavar="N",
                   help="keyed and parallel-safe writes running at once in this process (default: 256; "
                        "docs/SERVERS.md, 'What runs concurrently with what')")
    g.add_argument("--principal", metavar="NAME",
                   help="the principal recorded in receipts and seen by policies (never taken from tool arguments)")

    t = p.add_argument_group("transport")
    t.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio: JSON-RPC on stdin/stdout, for MCP hosts; http: streamable HTTP (default: %(default)s)")
    t.add_argument("--host", default="127.0.0.1",
                   help="HTTP bind address (default: %(default)s; loopback only unless you change it)")
    t.add_argument("--port", type=int, default=DEFAULT_PORT, help="HTTP port (default: %(default)s)")
    t.add_argument("--path", default=DEFAULT_PATH, help="HTTP endpoint path (default: %(default)s)")
    t.add_argument("--stateless", action="store_true",
                   help="HTTP without sessions, so several replicas can serve behind a load balancer")
    t.add_argument("--sse-retry-ms", type=_milliseconds, default=1000, metavar="MS",
                   help="HTTP with sessions: reconnection delay suggested to clients in each SSE stream's priming "
                        "event; a dropped stream resumes with Last-Event-ID from an in-memory store (default: %(default)s)")
    t.add_argument("--auth-token-env", metavar="VAR",
                   help="require 'Authorization: Bearer <token>' on HTTP, the token read from environment variable VAR")
    t.add_argument("--auth-token-file", metavar="PATH",
                   help="as --auth-token-env, the token read from the first line of PATH (keep it chmod 600)")
    t.add_argument("--allowed-host", action="append", default=[], metavar="HOST[:PORT|:*]",
                   help="accepted HTTP Host header (DNS-rebinding protection; repeatable; replaces the default). "
                        "Default on a loopback bind: loopback names on any port (tunnels and port forwards work)")
    t.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                   help="accepted Origin header with --allowed-host (repeatable)")
    t.add_argument("--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES, metavar="N",
                   help="largest accepted message: stdio line or HTTP body (default: %(default)s = 4 MiB)")
    t.add_argument("--no-fast-path", action="store_true",
                   help="serve every tools/call through the MCP SDK's own transport layers instead of the "
                        "direct path (same replies, more CPU per call; for comparison and fault isolation; env "
                        "OPENFUNCTIONS_FAST_PATH=0 does the same)")
    from ._event_loop import HTTP_PARSERS, LOOPS

    t.add_argument("--loop", choices=LOOPS, default="asyncio",
                   help="event loop: asyncio, or uvloop (libuv) if installed (the 'uvloop' extra; opt-in: with "
                        "1,000 clients at once it left new connections un-accepted for seconds, docs/SERVERS.md "
                        "'Event loop') (default: %(default)s)")
    t.add_argument("--http", choices=HTTP_PARSERS, default="auto", dest="http_parser",
                   help="HTTP/1.1 parser: httptools (llhttp, faster) or h11; auto: httptools when installed "
                        "(default: %(default)s; the same limits and guards either way)")
    _add_http_limits(p)
    t.add_argument("--shutdown-timeout", type=float, default=10.0, metavar="SECONDS",
                   help="on SIGTERM/SIGINT, how long running calls may finish before they are cancelled "
                        "(default: %(default)s)")
    t.add_argument("--sampling-timeout", type=_seconds, default=120.0, metavar="SECONDS",
                   help="how long an agent waits for the MCP host to answer one sampling request before its run "
                        "ends 'timeout' (default: %(default)s; an agent's limits may set its own)")

    d = p.add_argument_group("data")
    d.add_argument("--data-dir", type=Path, metavar="DIR",
                   help="where journals, artifacts and work state live (default: the per-user data dir, "
                        f"currently {default_data_dir()}; env OPENFUNCTIONS_MCP_DATA_DIR overrides)")
    d.add_argument("--database", metavar="URL", default=_database_url_from_env(),
                   help="keep the execution journal in PostgreSQL (postgresql://...), shared by server replicas "
                        "behind a load balancer; run `openfunctions-mcp db migrate` first (default: "
                        "$OPENFUNCTIONS_DATABASE_URL, which also sets --store; else files in the data dir); dead replicas' "
                        "calls, tasks and runs are swept every 5 s ($OPENFUNCTIONS_DATABASE_SWEEP_S to change it)")
    d.add_argument("--work-lease-ttl", metavar="SECONDS", type=float, default=30.0,
                   help="with --database and --profile work/all: seconds after which a replica that died holding the "
                        "work lease is taken over by another (default 30; renewed every third of it while held)")
    d.add_argument("--no-journal", action="store_true",
                   help="do not journal executions (receipts are still returned, but not durable)")
    d.add_argument("--journal-sync", choices=JOURNAL_SYNC_MODES, default=None,
                   help="how the execution journal makes each receipt durable before its reply. loop (the "
                        "default): the event loop writes and fsyncs, once per loop iteration, what that iteration "
                        "appended (no writer thread; fastest over HTTP under many clients and over stdio); thread: a "
                        "writer thread does while the loop goes on (for a slow disk, e.g. a network file system, "
                        "where the loop would wait for every fsync; docs/design/journal.md)")
    d.add_argument("--journal-reopen-interval", type=_seconds_or_off, default=5.0, metavar="SECONDS",
                   help="a journal that failed (a full disk) is re-opened through recovery at most this often, once "
                        "writes succeed again (default: %(default)s; 0: only a restart or `journal reopen PATH`)")
    d.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS, default=_env_log_level(),
                   help="stderr log level, any case (default: $OPENFUNCTIONS_LOG_LEVEL, else warning); human-readable "
                        "lines on a terminal, JSON lines otherwise; stdout never carries logs")


def _positive_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _count_or_off(text: str) -> int | None:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number (0: no limit), got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (no limit) or more, got {value}")
    return value or None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _seconds_or_off(text: str) -> float | None:
    """A positive number of seconds, or 0 for off (``None``)."""
    if text.strip() in ("0", "0.0"):
        return None
    return _seconds(text)


def _add_http_limits(p: argparse.ArgumentParser) -> None:
    """HTTP operating limits (docs/SERVERS.md, "Operating limits")."""
    from . import _http_limits as g

    h = p.add_argument_group("HTTP limits (see docs/SERVERS.md, 'Operating limits')")
    h.add_argument("--max-sessions", type=_count_or_off, default=g.DEFAULT_MAX_SESSIONS, metavar="N",
                   help="open MCP sessions at most; past it a new session gets 503 (0: no limit; default: %(default)s)")
    h.add_argument("--max-sessions-per-principal", type=_count_or_off, default=g.DEFAULT_MAX_SESSIONS_PER_PRINCIPAL,
                   metavar="N", help="open sessions per authenticated principal, or per client address without auth "
                                     "(0: no limit; default: %(default)s)")
    h.add_argument("--session-idle-timeout", type=_seconds, default=g.DEFAULT_SESSION_IDLE_TIMEOUT, metavar="SECONDS",
                   help="a session with no request in flight for this long is closed (default: %(default)s)")
    h.add_argument("--max-connections", type=int, default=g.DEFAULT_MAX_CONNECTIONS, metavar="N",
                   help="open connections at most; past it a connection gets 503 and is closed (default: %(default)s, "
                        "lowered to fit the open-file limit)")
    h.add_argument("--header-timeout", type=_seconds, default=g.DEFAULT_HEADER_TIMEOUT, metavar="SECONDS",
                   help="a connection must send a complete request head within this long (default: %(default)s)")
    h.add_argument("--body-timeout", type=_seconds, default=g.DEFAULT_BODY_TIMEOUT, metavar="SECONDS",
                   help="a POST body must arrive within this long (default: %(default)s)")
    h.add_argument("--keep-alive-timeout", type=int, default=g.DEFAULT_KEEP_ALIVE_TIMEOUT, metavar="SECONDS",
                   help="an idle keep-alive connection is closed after this long (default: %(default)s)")


def _database_url_from_env() -> str | None:
    # core.database_url_from_env's rule (blank means unset), restated here: importing core would make
    # `--help` import the executor, which this module avoids (test_cli checks it).
    return os.environ.get("OPENFUNCTIONS_DATABASE_URL", "").strip() or None


def build_parser(load: Collection[str] = ()) -> argparse.ArgumentParser:
    """The command's parser. Contributed sub-CLIs named in ``load`` are imported now; the others when they run."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="openfunctions-mcp",
        description="MCP servers over a validating, policy-checked, journaled tool executor. "
                    "Without a command, serves the 'tools' profile over stdio (what an MCP host runs).",
        epilog="Examples:\n"
               "  openfunctions-mcp                              # stdio, tools profile (MCP hosts)\n"
               "  openfunctions-mcp serve --transport http --port 8765\n"
               "  openfunctions-mcp serve --module mypkg.tools:registry\n"
               "  openfunctions-mcp demo                         # see it work\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve a profile over stdio or streamable HTTP",
                           description="Serve a profile over stdio or streamable HTTP.")
    _add_serve_options(serve)
    serve.set_defaults(func=_cmd_serve)

    demo = sub.add_parser("demo", help="start a server subprocess and drive a short session against it",
                          description="Start `openfunctions-mcp serve` as a subprocess and show, with the MCP "
                                      "SDK client, what an agent sees: the tools, a call, its receipt.")
    demo.add_argument("--profile", default="all", help="profile to demo (default: %(default)s: tools, artifacts, "
                                                        "and a work attempt from preview to complete)")
    demo.add_argument("--data-dir", type=Path, metavar="DIR",
                      help="data dir for the demo server (default: a fresh temporary dir)")
    demo.add_argument("--catalog", metavar="PATH", help="work catalog, passed to the server (work/all profiles)")
    demo.add_argument("--keep", action="store_true",
                      help="keep the temporary data dir (journal, artifacts, work state) to look at afterwards; "
                           "a --data-dir you give is always kept")
    demo.set_defaults(func=_cmd_demo)

    for name in _CONTRIBUTED:
        if name in load:
            _add_contributed(sub, name)
        else:
            _add_deferred(sub, name)
    return parser


# Sub-CLIs other packages contribute as ``add_commands(subparsers)``:
# command -> (module, the help line ``--help`` lists). The help line repeats
# the module's own so that ``--help`` need not import it (~0.2 s); test_cli
# checks they agree. Every module named here ships in this distribution.
_CONTRIBUTED = {
    "journal": ("openfunctions.store.journal_cli", "inspect and verify journals (read-only, no lock taken)"),
    "grant": ("openfunctions.work.cli", "issue, list and revoke work grants"),
    "work": ("openfunctions.work.attempts_cli", "resolve and inspect uncertain work operations"),
    "catalog": ("openfunctions.work.catalog_cli", "validate a work catalog and print its steps"),
    "runs": ("openfunctions.agents.cli", "list, show and follow agent run records"),
    "rag": ("openfunctions.rag.cli", "ingest documents and search them"),
    "gateway": ("openfunctions.providers.cli", "check the upstream MCP servers a gateway mounts"),
    "workflows": ("openfunctions.workflows.cli", "list, show and resume durable workflow runs"),
    "db": ("openfunctions.store.db_cli", "migrate, check and verify the PostgreSQL database that server replicas share"),
    "chat": ("openfunctions.chat.cli", "chat with a model that uses your tools (a terminal loop, or --serve for HTTP and a web page)"),
    "skills": ("openfunctions.skills.cli", "list and show the skills (markdown instructions) agents can load"),
    "plugins": ("openfunctions.plugins.cli", "list the installed plugins (tools, providers, skills, prompts)"),
    "test": ("openfunctions.servers.tool_tests_cli", "run the tests your tools carry, through the executor"),
    "ui": ("openfunctions.ui.cli", "browse runs, receipts, attempts, tasks and conversations in a local web page"),
    "engine": ("openfunctions.engine.cli", "run an agent session over stdin/stdout JSONL, or one task headless (run, review, subrun)"),
}


def _add_contributed(sub: Any, name: str) -> None:
    module, _ = _CONTRIBUTED[name]
    mod = import_module(module)
    mod.add_commands(sub)


def _add_deferred(sub: Any, name: str) -> None:
    """A stand-in listed in ``--help`` without importing the sub-CLI; :func:`main` loads the real one when it runs."""
    _, help_text = _CONTRIBUTED[name]
    p = sub.add_parser(name, help=help_text)
    p.set_defaults(func=lambda args, _n=name: _run_contributed(_n))


def _run_contributed(name: str) -> int:
    args = build_parser(load=(name,)).parse_args([name])
    status: int = args.func(args)
    return status


def _cmd_serve(args: argparse.Namespace) -> int:
    import anyio

    from openfunctions.core import OpenFunctionsError, configure_logging

    from ._event_loop import backend_options, resolve_http_parser, resolve_loop
    from .errors import DataDirLocked, ShutdownForced

    if args.log_level not in LOG_LEVELS:
        print(f"openfunctions-mcp: ${LOG_LEVEL_ENV}={os.environ.get(LOG_LEVEL_ENV)!r} is not a log level: use one of "
              f"{', '.join(LOG_LEVELS)}", file=sys.stderr)
        return 2
    try:
        loop = resolve_loop(args.loop)
        args.http_parser = resolve_http_parser(args.http_parser)
    except OpenFunctionsError as exc:
        print(f"openfunctions-mcp: {exc.message}", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    if args.module:
        from openfunctions.core import search_current_dir

        search_current_dir()  # the same for every command that takes --module (core/_imports.py)
    try:
        return anyio.run(_serve, args, backend_options=backend_options(loop))
    except ShutdownForced as exc:
        print(f"openfunctions-mcp: {exc.message}", file=sys.stderr)
        return 128 + exc.signum
    except DataDirLocked as exc:
        print(f"openfunctions-mcp: {exc.message}", file=sys.stderr)
        return 3
    except OpenFunctionsError as exc:
        print(f"openfunctions-mcp: {exc.message}", file=sys.stderr)
        return 2


def _log_event_loop() -> None:
    """One info line naming the loop this process runs on (``--loop``: asyncio or uvloop)."""
    import asyncio

    import structlog

    loop = type(asyncio.get_running_loop())
    structlog.get_logger("openfunctions.servers").info("event_loop", loop=loop.__module__.split(".")[0],
                                                       cls=loop.__name__)


async def _serve(args: argparse.Namespace) -> int:
    from . import __version__
    from ._http import read_auth_token, serve_http
    from ._journaling import prepare_data_dir
    from ._profiles import build_profile
    from ._runtime import run_stdio
    from ._server import create_mcp_server

    _log_event_loop()
    data_dir = prepare_data_dir((args.data_dir or default_data_dir()).expanduser())
    token = read_auth_token(env=args.auth_token_env, file=args.auth_token_file)
    if token and args.transport != "http":
        from .errors import AuthConfigError

        raise AuthConfigError("--auth-token-env/--auth-token-file apply to --transport http only")
    if args.transport == "http":
        _check_port_free(args.host, args.port)
    from ._extensions import open_extensions

    extensions = await open_extensions(args.provider, args.skills, plugins=args.profile in ("tools", "all"))
    try:
        profile = build_profile(
            args.profile,
            extensions=extensions,
            data_dir=data_dir,
            modules=args.module,
            files_root=args.files_root,
            examples=_serve_examples(args),
            catalog=args.catalog,
            principal=args.principal,
            store=args.store,
            upstreams=args.upstreams,
            database=None if args.no_journal else args.database,  # work's lease, attempts, grants (servers/_work_database.py)
            work_lease_ttl=args.work_lease_ttl,
            sampling_timeout=args.sampling_timeout,
        )
    except BaseException:
        await extensions.aclose()
        raise
    profile.closers[:0] = extensions.closers  # closers run in reverse: the providers close last
    if args.max_parallel_writes is not None:
        profile.registry.executor.scheduler.max_parallel_writes = args.max_parallel_writes
    server = create_mcp_server(
        profile.registry,
        name=f"openfunctions-mcp-{profile.name}",
        version=__version__,
        instructions=profile.instructions,
        principal=args.principal,
        journal_dir=None if args.no_journal else data_dir,
        profile=profile.name,
        close_timeout=args.shutdown_timeout,
        journal_reopen_interval=args.journal_reopen_interval,
        database_url=None if args.no_journal else args.database,
    )
    profile.install(server)
    try:
        # The server first (its execution journal attached), then the profile's starters: what a starter
        # runs at once (a durable workflow's resumed runs) is journaled like any call.
        await server.start()
        try:
            await profile.start()
        except BaseException:
            await server.close()
            raise
        if args.transport == "stdio":
            if sys.stdin.isatty():
                print(f"openfunctions-mcp: serving the '{profile.name}' profile on stdio, waiting for an MCP client "
                      "on stdin. An MCP host (Claude Desktop, ...) launches this command itself; to try it by hand, "
                      "run `openfunctions-mcp demo`. Ctrl-C to quit.", file=sys.stderr, flush=True)
            await run_stdio(server, max_message_bytes=args.max_message_bytes,
                            fast_path=False if args.no_fast_path else None, journal_sync=args.journal_sync or "loop")
        else:
            auth = "on (Authorization: Bearer <token>)" if token else "off"
            print(f"openfunctions-mcp: serving the '{profile.name}' profile over streamable HTTP at "
                  f"http://{_url_host(args.host)}:{args.port}{args.path} (auth {auth})", file=sys.stderr, flush=True)
            await serve_http(
                server,
                host=args.host,
                port=args.port,
                path=args.path,
                stateless=args.stateless,
                auth_token=token,
                allowed_hosts=args.allowed_host or None,
                allowed_origins=args.allowed_origin or None,
                max_body_bytes=args.max_message_bytes,
                retry_interval=args.sse_retry_ms,
                log_level=args.log_level,
                max_sessions=args.max_sessions,
                max_sessions_per_principal=args.max_sessions_per_principal,
                session_idle_timeout=args.session_idle_timeout,
                body_timeout=args.body_timeout,
                header_timeout=args.header_timeout,
                keep_alive_timeout=args.keep_alive_timeout,
                max_connections=args.max_connections,
                fast_path=False if args.no_fast_path else None,
                http_parser=args.http_parser,
                journal_sync=args.journal_sync or "loop",
            )
    finally:
        await profile.aclose()
    return 0


def _serve_examples(args: argparse.Namespace) -> bool:
    """The example tools are served unless ``--no-example-tools``, or ``--module`` without ``--example-tools``
    (a server of your own tools lists yours only)."""
    if args.example_tools:
        return True
    if args.no_example_tools:
        return False
    if args.module and args.files_root:
        from openfunctions.core.errors import ConfigurationError

        raise ConfigurationError("--files-root enables of_list_dir, an example tool, and --module serves only your "
                                 "tools: add --example-tools to serve the example tools beside yours")
    return not args.module


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _check_port_free(host: str, port: int) -> None:
    """Fail with one line (exit 2) when the HTTP port is taken, before uvicorn would (with a traceback, exit 1).

    Binds the way uvicorn does (SO_REUSEADDR), so a port in TIME_WAIT is not reported as taken.
    """
    import errno
    import socket

    from openfunctions.core.errors import ConfigurationError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigurationError(f"port {port} on {host} is already in use: stop what holds it or pass "
                                         "another --port") from None
            raise ConfigurationError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _cmd_demo(args: argparse.Namespace) -> int:
    from ._demo import run_demo

    return run_demo(profile=args.profile, data_dir=args.data_dir, catalog=args.catalog, keep=args.keep)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0].split("=", 1)[0] not in _TOP_LEVEL_OPTIONS):
        argv = ["serve", *argv]  # the bare command serves: `openfunctions-mcp --profile work` is `serve --profile work`
    # Import a contributed sub-CLI only when its command is the one given (no top-level option takes a value).
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(load=(command,) if command in _CONTRIBUTED else ())
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    rc = args.func(args)
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
