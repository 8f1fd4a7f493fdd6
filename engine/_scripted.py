"""``--model scripted:FILE``: a fake model that plays replies from a JSONL file (tests, docs, offline use).

This is not a model: it never reads what it is shown. Each line of the file is one reply, in order, in the
forms :class:`~openfunctions.adapters.ScriptedAdapter` takes:

- ``"text"`` (a JSON string) or ``{"text": "..."}``: a text reply;
- ``{"tool": "name", "arguments": {...}}``: one tool call;
- ``{"tool_calls": [{"name", "arguments", "id"?}, ...], "text"?}``: several;

plus one form for crash tests: ``{"wait_file": "PATH", "then": <reply>}`` answers ``then`` once the file
``PATH`` exists (polled every 20 ms), so a test can hold the model at a known point and kill the engine there.

Blank lines and lines starting with ``#`` are skipped. The engine tells the adapter how many replies the
session already consumed (:meth:`ScriptFileAdapter.skip`), so a resumed session continues the script
where the recorded session left it; a reply asked for past the end raises ``ScriptExhausted``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import anyio

from openfunctions.adapters import ChatOptions, ChatReply, Message, ScriptExhausted, StreamEvent, ToolCall, Usage

from ._errors import EngineConfigError

SCRIPT_MAX_BYTES = 16 * 2**20


def _check_reply(item: Any, where: str) -> None:
    if isinstance(item, str):
        return
    if not isinstance(item, dict):
        raise EngineConfigError(f"{where}: a reply is a JSON string or object, not {type(item).__name__}")
    if "wait_file" in item:
        if not isinstance(item["wait_file"], str) or "then" not in item:
            raise EngineConfigError(f"{where}: wait_file needs a path string and a 'then' reply")
        _check_reply(item["then"], where)
    elif "tool" in item:
        if not isinstance(item["tool"], str) or not isinstance(item.get("arguments", {}), dict):
            raise EngineConfigError(f"{where}: 'tool' is a name and 'arguments' an object")
    elif "tool_calls" in item:
        calls = item["tool_calls"]
        if not isinstance(calls, list) or not calls or not all(isinstance(c, dict) and isinstance(c.get("name"), str)
                                                               for c in calls):
            raise EngineConfigError(f"{where}: 'tool_calls' is a non-empty list of objects with a 'name'")
    elif not isinstance(item.get("text"), str):
        raise EngineConfigError(f"{where}: an object reply has 'text', 'tool', 'tool_calls' or 'wait_file'")


def load_script(path: str | Path) -> list[Any]:
    p = Path(path)
    try:
        if p.stat().st_size > SCRIPT_MAX_BYTES:
            raise EngineConfigError(f"script {str(p)!r} is over {SCRIPT_MAX_BYTES} bytes")
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise EngineConfigError(f"script {str(p)!r}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise EngineConfigError(f"script {str(p)!r} is not UTF-8 ({exc.reason})") from None
    replies = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            item = json.loads(line)
        except ValueError as exc:
            raise EngineConfigError(f"script {str(p)!r} line {n} is not JSON: {exc}") from None
        _check_reply(item, f"script {str(p)!r} line {n}")
        replies.append(item)
    return replies


class ScriptFileAdapter:
    """Plays a script file's replies (see the module docstring). ``provider`` is ``scripted``."""

    provider = "scripted"

    def __init__(self, replies: Sequence[Any], *, model: str = "scripted") -> None:
        self.model = model
        self._replies = list(replies)
        self._next = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptFileAdapter:
        return cls(load_script(path), model=Path(path).name)

    def skip(self, n: int) -> None:
        """Continue after the first ``n`` replies (a resumed session consumed them)."""
        self._next = max(0, n)

    async def chat(self, messages: Sequence[Message], tools: Sequence[Any] = (),
                   options: ChatOptions | None = None) -> ChatReply:
        if self._next >= len(self._replies):
            raise ScriptExhausted(f"the script has no reply left: it holds {len(self._replies)} and reply "
                                  f"{self._next + 1} was asked for", details={"script_length": len(self._replies)})
        n = self._next
        item = self._replies[n]
        self._next += 1
        while isinstance(item, dict) and "wait_file" in item:
            while not Path(item["wait_file"]).exists():
                await anyio.sleep(0.02)
            item = item["then"]
        if isinstance(item, str):
            item = {"text": item}
        if "tool" in item:
            item = {"tool_calls": [{"name": item["tool"], "arguments": item.get("arguments", {})}]}
        if "tool_calls" in item:
            calls = tuple(ToolCall(id=c.get("id") or f"call_{n + 1}_{i}", name=c["name"],
                                   arguments=dict(c.get("arguments") or {})) for i, c in enumerate(item["tool_calls"]))
            return ChatReply(text=item.get("text"), tool_calls=calls, model=self.model, provider=self.provider,
                             stop_reason="tool_use")
        return ChatReply(text=item["text"], model=self.model, provider=self.provider,
                         usage=Usage(0, len(item["text"].split())))

    async def stream(self, messages: Sequence[Message], tools: Sequence[Any] = (),
                     options: ChatOptions | None = None) -> AsyncIterator[StreamEvent]:
        reply = await self.chat(messages, tools, options)
        if reply.text:
            yield StreamEvent("text", text=reply.text)
        for call in reply.tool_calls:
            yield StreamEvent("tool_call", tool_call=call)
        yield StreamEvent("done", reply=reply)


__all__ = ["ScriptFileAdapter", "load_script"]
