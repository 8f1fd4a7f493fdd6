"""``openfunctions-mcp chat``: the chat agent on a terminal, or served over HTTP with ``--serve``.

Exit codes: 0 done, 2 a configuration problem (the message says what to set).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from typing import Any

HELP = "chat with a model that uses your tools (a terminal loop, or --serve for HTTP and a web page)"
_EPILOG = """\
model: --provider/--model, else the environment: ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY,
XAI_API_KEY, OPENROUTER_API_KEY, DEEPSEEK_API_KEY or MOONSHOT_API_KEY (OPENFUNCTIONS_PROVIDER /
OPENFUNCTIONS_MODEL override the choice).
Offline demo: --provider scripted --script replies.json (a JSON list of replies, see docs/CHAT.md).

examples:
  openfunctions-mcp chat --module mytools:registry
  openfunctions-mcp chat --provider openai --model gpt-4o-mini --prompt concise
  openfunctions-mcp chat --serve --port 8765          # then open http://127.0.0.1:8765/
  openfunctions-mcp chat --provider scripted --script replies.json
"""


def add_commands(subparsers: Any) -> None:
    """Add the ``chat`` command to an argparse subparsers object."""
    p = subparsers.add_parser("chat", help=HELP, description="Chat with a model that calls your tools through the "
                              "openfunctions executor (every call has a receipt; every turn leaves a run record).",
                              epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--provider", help="anthropic, openai, openai-responses, gemini, xai, openrouter, deepseek, kimi, "
                                      "or scripted (with --script)")
    p.add_argument("--model", help="model name, or provider:model (default: the provider's default)")
    p.add_argument("--script", type=Path, metavar="FILE",
                   help="with --provider scripted: a JSON list of replies the scripted model plays (offline)")
    p.add_argument("--module", metavar="PKG.MOD:ATTR", help="tools to offer: a ToolRegistry or list of tools (attr default: registry)")
    p.add_argument("--tool", dest="tools", action="append", metavar="NAME", help="offer only this tool (repeatable)")
    p.add_argument("--exclude", action="append", default=[], metavar="NAME", help="never offer this tool (repeatable)")
    p.add_argument("--prompt", help="preset (assistant, concise, researcher, operator), inline text, or a .md file")
    p.add_argument("--provider-module", dest="context_providers", action="append", default=[], metavar="PKG.MOD:ATTR",
                   help="a context provider to connect (repeatable)")
    p.add_argument("--no-memory", action="store_true", help="no conversation or fact memory")
    p.add_argument("--thread", metavar="ID", help="continue this conversation thread (default: a new one)")
    p.add_argument("--data-dir", dest="chat_data_dir", type=Path, metavar="DIR",
                   help="run records, receipts, memory (default: the per-user data dir)")
    p.add_argument("--serve", action="store_true", help="serve over HTTP instead of the terminal loop")
    p.add_argument("--host", default="127.0.0.1", help="with --serve: bind address (default 127.0.0.1; others need a token)")
    p.add_argument("--port", type=int, default=8765, help="with --serve: port (default 8765; 0 picks a free one)")
    p.add_argument("--auth-token-env", metavar="VAR", help="with --serve: require Authorization: Bearer <the value of VAR>")
    p.add_argument("--auth-token-file", metavar="PATH", help="with --serve: as --auth-token-env, the token from PATH's first line")
    p.add_argument("--max-conversations", type=int, default=None, metavar="N",
                   help="with --serve: conversations kept, one per client (default 256; least recently used evicted)")
    p.add_argument("--context-ceiling", type=int, default=None, metavar="TOKENS",
                   help="compact a conversation's older turns into a model-written summary once what is sent would "
                        "pass TOKENS (estimated per provider; default: never, the history window only)")
    p.set_defaults(func=cmd_chat)


async def _serve_until_sigterm(serving: Any) -> None:
    """Serve until done or SIGTERM, then return: a stop that leaves no traceback behind.

    A SIGTERM turned into KeyboardInterrupt (as the terminal loop does) would surface inside the server's
    task group, which asyncio then logs as an unhandled error while shutting down. Here the signal is
    received on the event loop instead (uvicorn shuts itself down on it first, while it serves, and then
    passes the signal on) and cancels the serving scope.
    """
    import anyio

    async def watch(scope: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM) as signals:
            async for _ in signals:
                scope.cancel()
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch, tg.cancel_scope)
        await serving
        tg.cancel_scope.cancel()


def _fail(message: str) -> int:
    print(f"openfunctions-mcp chat: {message}", file=sys.stderr)
    return 2


def cmd_chat(args: argparse.Namespace) -> int:
    import anyio

    from openfunctions.core import OpenFunctionsError, configure_logging

    from ._agent import open_chat_agent, scripted_adapter_from_file

    configure_logging()
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)  # this command prints its own "served at" line
    if args.module or args.context_providers:
        from openfunctions.core import search_current_dir

        search_current_dir()  # --module mytools finds ./mytools.py, as for every command that takes --module
    if (args.auth_token_env or args.auth_token_file) and not args.serve:
        return _fail("--auth-token-env/--auth-token-file apply to --serve only")
    config: dict[str, Any] = {
        "provider": args.provider, "model": args.model, "module": args.module, "tools": args.tools,
        "exclude": args.exclude, "prompt": args.prompt, "providers": args.context_providers,
        "memory": not args.no_memory, "thread_id": args.thread, "data_dir": args.chat_data_dir,
    }
    if args.max_conversations is not None:
        config["max_conversations"] = args.max_conversations
    if args.context_ceiling is not None:
        config["context_ceiling"] = args.context_ceiling
    if args.script is not None:
        if args.provider not in (None, "scripted"):
            return _fail("--script goes with --provider scripted")
        config["provider"] = None
    try:
        if args.provider == "scripted" or args.script is not None:
            if args.script is None:
                return _fail("--provider scripted needs --script FILE: a JSON list of replies, e.g. "
                             '["Hello!", {"tool": "add", "arguments": {"a": 1, "b": 2}}, "1 + 2 = 3."]')
            config["provider"] = None
            config["adapter"] = scripted_adapter_from_file(args.script)
        token = None
        if args.serve and (args.auth_token_env or args.auth_token_file):
            from openfunctions.core import read_auth_token

            token = read_auth_token(env=args.auth_token_env, file=args.auth_token_file)

        async def run() -> None:
            agent = await open_chat_agent(config)
            async with agent:
                if args.serve:
                    def ready(port: int) -> None:
                        print(f"chat served at http://{args.host}:{port}/ (Ctrl-C stops)", file=sys.stderr, flush=True)

                    await _serve_until_sigterm(agent.serve(port=args.port, host=args.host, token=token, ready=ready))
                else:
                    await agent.interactive()

        signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops like Ctrl-C: a clean exit
        anyio.run(run)
    except OpenFunctionsError as exc:
        message = exc.message
        if exc.code == "chat_config_invalid" and "no model provider configured" in message:
            names = ", ".join(exc.details.get("env") or ())
            message = (f"no model provider configured: set one of {names} (an API key), or pass --provider NAME "
                       "[--model MODEL]\n  offline demo: openfunctions-mcp chat --provider scripted --script replies.json "
                       "(see docs/CHAT.md)")
        return _fail(message)
    except KeyboardInterrupt:
        return 0
    return 0


__all__ = ["HELP", "add_commands", "cmd_chat"]
