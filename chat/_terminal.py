"""``interactive()``: a line-oriented chat on a terminal (or any text streams).

Each line is one turn, streamed: text as it arrives, and one line per tool
call with its outcome and receipt id. Commands: ``/reset`` (new
conversation; saved facts stay), ``/exit`` (or end of input), ``/help``.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, TextIO

import anyio

from openfunctions.core import OpenFunctionsError

HELP = "commands: /reset starts a new conversation (saved facts stay), /exit quits, /help shows this"
PROMPT = "you> "


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def run_loop(agent: Any, stdin: TextIO, output: TextIO) -> None:
    tty = stdin is sys.stdin and output is sys.stdout and stdin.isatty()
    if tty:
        with contextlib.suppress(ImportError):  # line editing and history for input()
            import readline  # noqa: F401

    def say(text: str = "", end: str = "\n") -> None:
        output.write(text + end)
        output.flush()

    def read() -> str | None:
        if tty:  # input() uses readline's line editing
            try:
                return input(PROMPT)
            except EOFError:
                return None
        say(PROMPT, end="")
        line = stdin.readline()
        return None if line == "" else line.rstrip("\n")

    say(f"chat: {agent.name} on {getattr(agent.adapter, 'provider', '?')}/{getattr(agent.adapter, 'model', '?')}, "
        f"{len(agent.tool_names)} tool(s), memory {'on' if agent.memory is not None else 'off'}. {HELP}")
    while True:
        line = await anyio.to_thread.run_sync(read, abandon_on_cancel=True)
        if line is None:
            say()
            return
        text = line.strip()
        if not text:
            continue
        if text in ("/exit", "/quit"):
            return
        if text == "/help":
            say(HELP)
            continue
        if text == "/reset":
            thread = await agent.reset()
            say(f"(new conversation {thread}; saved facts stay)")
            continue
        try:
            events = agent.chat(line, stream=True)
        except OpenFunctionsError as exc:
            say(f"error: {exc.message}")
            continue
        started = False
        async with contextlib.aclosing(events):
            async for event in events:
                if event.type == "text":
                    if not started:
                        say("bot> ", end="")
                        started = True
                    say(event.data["text"], end="")
                elif event.type == "tool_call":
                    if started:
                        say()
                        started = False
                    say(f"  [tool] {event.data['name']}({_short(event.data['arguments'])})")
                elif event.type == "tool_result":
                    receipt = event.data.get("receipt_id") or "no receipt"
                    say(f"  [tool] {event.data['name']} -> {event.data.get('outcome')} ({receipt})")
                elif event.type == "done":
                    if started:
                        say()
                    d = event.data
                    if d["status"] != "completed":
                        err = d.get("error") or {}
                        say(f"(turn {d['status']}: {err.get('message', 'no answer')}; run {d['run_id']})")
                    for w in d["metadata"].get("warnings", []):
                        say(f"(warning: {w['message']})")


__all__ = ["HELP", "run_loop"]
