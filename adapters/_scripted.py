"""ScriptedAdapter: replays a list of replies. The one fake model, for tests, demos and offline use.

Each script item is one of:

- a :class:`ChatReply`;
- a ``str``: a text reply;
- a ``dict``: ``{"text": ...}``, or ``{"tool_calls": [{"name", "arguments", "id"?}, ...]}``,
  or the shorthand ``{"tool": name, "arguments": {...}}``;
- an ``Exception`` instance: raised (to play a failing provider);
- a callable ``(messages, tools) -> item`` (sync or async), to answer from
  what the model was shown or to wait on an event.

Asked for more replies than it holds, it raises :class:`ScriptExhausted`
naming how many it had: it never invents an answer.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from openfunctions.core import ToolDefinition

from ._errors import AdapterError, ScriptExhausted
from ._types import ChatOptions, ChatReply, Message, StreamEvent, ToolCall, Usage, stream_from_chat


class ScriptedAdapter:
    provider = "scripted"

    def __init__(self, script: Iterable[Any], *, model: str = "scripted") -> None:
        self.model = model
        self._script = list(script)
        self._next = 0
        #: What each call was shown: ``(messages, tool names, options)``.
        self.calls: list[tuple[list[Message], list[str], ChatOptions]] = []

    @property
    def remaining(self) -> int:
        return len(self._script) - self._next

    async def chat(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] = (), options: ChatOptions | None = None
    ) -> ChatReply:
        opts = options or ChatOptions()
        self.calls.append((list(messages), [t.name for t in tools], opts))
        if self._next >= len(self._script):
            raise ScriptExhausted(
                f"the scripted adapter has no reply left: it held {len(self._script)} and was asked for reply "
                f"{self._next + 1}",
                details={"script_length": len(self._script)},
            )
        item = self._script[self._next]
        self._next += 1
        if callable(item) and not isinstance(item, (ChatReply, Exception)):
            item = item(list(messages), list(tools))
            if inspect.isawaitable(item):
                item = await item
        if isinstance(item, BaseException):
            raise item
        return self._reply(item)

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] = (), options: ChatOptions | None = None
    ) -> AsyncIterator[StreamEvent]:
        reply = await self.chat(messages, tools, options)
        async for event in stream_from_chat(reply):
            yield event

    def _reply(self, item: Any) -> ChatReply:
        n = self._next
        if isinstance(item, ChatReply):
            return item
        if isinstance(item, str):
            return ChatReply(text=item, model=self.model, provider=self.provider, usage=Usage(0, len(item.split())))
        if isinstance(item, dict):
            if "tool" in item:
                item = {"tool_calls": [{"name": item["tool"], "arguments": item.get("arguments", {})}]}
            if "tool_calls" in item:
                calls = tuple(
                    ToolCall(id=c.get("id") or f"call_{n}_{i}", name=c["name"], arguments=dict(c.get("arguments") or {}))
                    for i, c in enumerate(item["tool_calls"])
                )
                return ChatReply(text=item.get("text"), tool_calls=calls, model=self.model, provider=self.provider,
                                 stop_reason="tool_use")
            if "text" in item:
                return ChatReply(text=item["text"], model=self.model, provider=self.provider)
        raise AdapterError(f"scripted reply {n} is not a ChatReply, str, dict with text/tool_calls/tool, or exception: {item!r}")


__all__ = ["ScriptedAdapter"]
