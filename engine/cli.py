"""``openfunctions-mcp engine``: one agent session over stdin/stdout JSONL, or headless.

- ``engine [--session ID]``: a session; commands on stdin, events on stdout (docs/formats/engine.md).
- ``engine run [--session ID] [TASK]``: one task; the exit code says how it ended.
- ``engine review (--diff FILE | --files FILE...)``: a run whose result is a validated verdict.
- ``engine subrun --parent ID TASK``: a run recorded as the child of session ``ID``.

Exit codes: 0 finished; 1 failed; 2 bad arguments or configuration (the message says what); 3 aborted
(cancel or a limit); 4 interrupted (start again with ``--session`` to continue); 5 a review that requests
changes. docs/ENGINE.md has examples.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

HELP = "run an agent session over stdin/stdout JSONL, or one task headless (run, review, subrun)"
_EPILOG = """\
model: --model provider:name (openai:gpt-4o-mini, anthropic:claude-sonnet-4-5, ...; keys from the
environment), or --model scripted:FILE, a fake model playing a JSONL file of replies (tests, offline).

examples:
  openfunctions-mcp engine --model scripted:replies.jsonl --module mytools:registry
  openfunctions-mcp engine run --model openai:gpt-4o-mini --module mytools "add 2 and 3"
  openfunctions-mcp engine run --session ses_... --model openai:gpt-4o-mini      # continue after a crash
  openfunctions-mcp engine review --model anthropic:claude-sonnet-4-5 --diff change.diff
  openfunctions-mcp engine subrun --parent ses_... --model openai:gpt-4o-mini "check the tests"
"""


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return v


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return v


_DEFAULTS: dict[str, Any] = {"model": None, "module": None, "engine_data_dir": None, "system": None,
                             "max_rounds": 32, "max_tool_calls": 128, "max_tokens": 4096, "turn_timeout": None,
                             "context_ceiling": None, "session": None}


def _common(p: argparse.ArgumentParser, *, session: bool = True) -> None:
    s = argparse.SUPPRESS  # given before or after the subcommand: the value given wins, else _DEFAULTS
    p.add_argument("--model", default=s, help="provider:name, or scripted:FILE (default: from the environment)")
    p.add_argument("--module", default=s, metavar="PKG.MOD:ATTR",
                   help="the tools: a ToolRegistry, a list of tools, or one tool (attr default: registry)")
    p.add_argument("--data-dir", dest="engine_data_dir", type=Path, default=s, metavar="DIR",
                   help="where sessions live (DIR/engine/sessions; default: the per-user data dir)")
    p.add_argument("--system", default=s, help="the system prompt: text, or @FILE")
    p.add_argument("--max-rounds", type=_positive_int, default=s, help="rounds per turn (default 32)")
    p.add_argument("--max-tool-calls", type=_positive_int, default=s, help="tool calls per turn (default 128)")
    p.add_argument("--max-tokens", type=_positive_int, default=s, help="tokens per model call (default 4096)")
    p.add_argument("--turn-timeout", type=_seconds, default=s, metavar="SECONDS", help="each turn's deadline (default none)")
    p.add_argument("--context-ceiling", type=_positive_int, default=s, metavar="TOKENS",
                   help="compact before a model call whose estimated context is over this (default: only on 'compact')")
    if session:
        p.add_argument("--session", default=s, metavar="ID", help="continue this recorded session")


def add_commands(subparsers: Any) -> None:
    """Add the ``engine`` command to an argparse subparsers object."""
    p = subparsers.add_parser("engine", help=HELP, description=HELP, epilog=_EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(p)
    sub = p.add_subparsers(dest="engine_command", metavar="{run,review,subrun}")
    run = sub.add_parser("run", help="one task, headless; the exit code says how it ended")
    _common(run)
    run.add_argument("task", nargs="?", help="the task (omit with --session to continue its open turn)")
    review = sub.add_parser("review", help="review a diff or files; the result is a validated verdict")
    _common(review)
    what = review.add_mutually_exclusive_group(required=True)
    what.add_argument("--diff", type=Path, metavar="FILE", help="a unified diff")
    what.add_argument("--files", nargs="+", type=Path, metavar="FILE", help="files to review")
    subrun = sub.add_parser("subrun", help="one task as the child of a session")
    _common(subrun, session=False)
    subrun.add_argument("--parent", required=True, metavar="ID", help="the parent session's id")
    subrun.add_argument("task", help="the task")
    p.set_defaults(func=cmd_engine)


def _fail(message: str) -> int:
    print(f"openfunctions-mcp engine: {message}", file=sys.stderr)
    return 2


def _adapter(spec: str | None) -> Any:
    from openfunctions.adapters import resolve_adapter

    from ._scripted import ScriptFileAdapter

    if spec and spec.startswith("scripted:"):
        return ScriptFileAdapter.from_file(spec.split(":", 1)[1])
    return resolve_adapter(model=spec)


def _tools(spec: str | None) -> list[Any]:
    from openfunctions.core import ToolDefinition, ToolRegistry, import_spec

    from ._errors import EngineConfigError

    if not spec:
        return []
    obj = import_spec(spec, default_attr="registry", error=EngineConfigError, from_cwd=True)
    if callable(obj) and not isinstance(obj, (ToolRegistry, ToolDefinition)):
        obj = obj()
    if isinstance(obj, ToolRegistry):
        return obj.list()
    if isinstance(obj, ToolDefinition):
        return [obj]
    if isinstance(obj, (list, tuple)) and all(isinstance(t, ToolDefinition) for t in obj):
        return list(obj)
    raise EngineConfigError(f"--module {spec!r}: expected a ToolRegistry, a list of tools or one tool, "
                            f"got {type(obj).__name__}")


def cmd_engine(args: argparse.Namespace) -> int:
    import anyio

    from openfunctions.core import OpenFunctionsError, configure_logging
    from openfunctions.core.files import default_data_dir

    from . import _protocol as P
    from ._review import VERDICT_SCHEMA, review_task
    from ._session import DEFAULT_SYSTEM, Limits, Session, SessionConfig, session_path

    def opt(name: str) -> Any:
        return getattr(args, name, _DEFAULTS[name])

    configure_logging()
    command = args.engine_command
    try:
        system = opt("system") or DEFAULT_SYSTEM
        if system.startswith("@"):
            try:
                system = Path(system[1:]).read_text(encoding="utf-8")
            except OSError as exc:
                return _fail(f"--system {system!r}: cannot read it ({exc.strerror or exc})")
        data_dir = Path(opt("engine_data_dir") or default_data_dir()).expanduser()
        config = SessionConfig(
            adapter=_adapter(opt("model")), data_dir=data_dir, tools=_tools(opt("module")), system=system,
            # limits given on the command line apply; none given: a resumed session keeps its recorded ones
            limits=Limits(max_rounds=opt("max_rounds"), max_tool_calls=opt("max_tool_calls"),
                          max_tokens=opt("max_tokens"), turn_timeout_s=opt("turn_timeout"))
            if any(hasattr(args, n) for n in ("max_rounds", "max_tool_calls", "max_tokens", "turn_timeout")) else None,
            context_ceiling=opt("context_ceiling"), mode=command or "session",
        )
        task = getattr(args, "task", None)
        if command == "review":
            config.result_schema = VERDICT_SCHEMA
            task = review_task(files=args.files or (), diff=args.diff)
        if command == "subrun":
            if not session_path(data_dir, args.parent).exists():
                return _fail(f"--parent {args.parent!r}: no such session in {str(data_dir / 'engine' / 'sessions')!r}")
            config.parent_session_id = args.parent
        session_id = opt("session") if command != "subrun" else None
        if command == "run" and task is None and session_id is None:
            return _fail("run needs a TASK, or --session ID to continue a session's open turn")
        emit = P.event_writer(sys.stdout)

        async def main() -> int:
            try:
                session = await Session.open(config, session_id=session_id, emit=emit)
                async with session:
                    if command is None:
                        return await P.serve_session(session)
                    return await P.run_headless(session, task)
            finally:
                close = getattr(config.adapter, "aclose", None)  # a provider adapter's HTTP client
                if close is not None:
                    await close()

        return anyio.run(main)
    except OpenFunctionsError as exc:
        return _fail(f"{exc.message} ({exc.code})")


__all__ = ["HELP", "add_commands", "cmd_engine"]
