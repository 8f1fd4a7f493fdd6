"""OpenAI Chat Completions wire format: OpenAI, and xAI and OpenRouter at their own base URLs.

Request: ``POST {base}/chat/completions`` with ``model``, ``messages``
(``system``/``user``/``assistant`` with ``tool_calls``/``tool`` with
``tool_call_id``), ``tools`` (``{"type": "function", "function": ...}``),
``max_tokens``; streamed with ``stream: true`` and
``stream_options.include_usage``. Reply: ``choices[0].message`` (``content``,
``tool_calls[].function.{name, arguments}`` where arguments is a JSON
string), ``finish_reason``, ``usage.{prompt_tokens, completion_tokens}``.
A stream sends ``data: {chunk}`` lines (tool-call arguments arrive as string
fragments keyed by ``index``) and ends with ``data: [DONE]``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from openfunctions.core import ToolDefinition, to_openai

from ._errors import MalformedResponse
from ._http import HttpAdapter, StreamParser
from ._types import ChatOptions, ChatReply, Message, StopReason, StreamEvent, ToolCall, Usage, parse_arguments

_STOP: dict[str | None, StopReason] = {
    "stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens",
    "content_filter": "content_filter",
}


def openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.role == "assistant" and m.tool_calls:
            out.append({
                "role": "assistant",
                "content": m.content or None,
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                    for c in m.tool_calls
                ],
            })
        else:
            out.append({"role": m.role, "content": m.content})
    return out


class OpenAIAdapter(HttpAdapter):
    provider = "openai"
    default_base_url = "https://api.openai.com/v1"

    def _url(self, stream: bool) -> str:
        return f"{self.base_url}/chat/completions"

    def _headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}", "content-type": "application/json"}

    def _body(self, messages: Sequence[Message], tools: Sequence[ToolDefinition], opts: ChatOptions, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": openai_messages(messages), "max_tokens": opts.max_tokens}
        if tools:
            body["tools"] = [to_openai(t) for t in tools]
            if opts.tool_choice:
                body["tool_choice"] = opts.tool_choice
        if opts.temperature is not None:
            body["temperature"] = opts.temperature
        if opts.stop:
            body["stop"] = list(opts.stop)
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        return body

    def _parse(self, data: Any) -> ChatReply:
        choice = data["choices"][0]
        msg = choice["message"]
        calls = tuple(
            ToolCall(id=c["id"], name=c["function"]["name"],
                     arguments=parse_arguments(c["function"].get("arguments"), where=self.provider))
            for c in (msg.get("tool_calls") or [])
        )
        usage = data.get("usage") or {}
        finish = choice.get("finish_reason")
        return ChatReply(
            text=msg.get("content"),
            tool_calls=calls,
            model=data.get("model") or self.model,
            stop_reason="tool_use" if calls else _STOP.get(finish, "other"),
            raw_stop_reason=finish,
            usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
            provider=self.provider,
        )

    def _stream_parser(self) -> StreamParser:
        return _OpenAIStream(self)


class _OpenAIStream(StreamParser):
    def __init__(self, adapter: OpenAIAdapter) -> None:
        self.adapter = adapter
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.model = adapter.model
        self.usage = Usage()
        self.done = False

    def feed(self, event: str | None, data: str) -> list[StreamEvent]:
        if data.strip() == "[DONE]":
            self.done = True
            return []
        chunk = json.loads(data)
        if "error" in chunk:
            from ._errors import ProviderUnavailable
            from ._http import _provider_message

            raise ProviderUnavailable(f"{self.adapter.provider} reported an error mid-stream: "
                                      f"{_provider_message(data.encode())}", details={"provider": self.adapter.provider})
        self.model = chunk.get("model") or self.model
        if chunk.get("usage"):
            u = chunk["usage"]
            self.usage = Usage(int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0))
        out: list[StreamEvent] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.text.append(delta["content"])
                out.append(StreamEvent("text", text=delta["content"]))
            for tc in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(int(tc.get("index", 0)), {"id": None, "name": "", "arguments": ""})
                if tc.get("id"):
                    slot["id"] = tc["id"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["name"] += fn["name"]
                if fn.get("arguments"):
                    slot["arguments"] += fn["arguments"]
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return out

    def finish(self) -> ChatReply:
        if not self.done:
            raise MalformedResponse(f"{self.adapter.provider} stream ended without [DONE]",
                                    details={"provider": self.adapter.provider})
        calls = tuple(
            ToolCall(id=s["id"] or f"call_{i}", name=s["name"], arguments=parse_arguments(s["arguments"], where=self.adapter.provider))
            for i, s in sorted(self.calls.items())
        )
        return ChatReply(
            text="".join(self.text) or None,
            tool_calls=calls,
            model=self.model,
            stop_reason="tool_use" if calls else _STOP.get(self.finish_reason, "other"),
            raw_stop_reason=self.finish_reason,
            usage=self.usage,
            provider=self.adapter.provider,
        )


class XAIAdapter(OpenAIAdapter):
    """xAI (Grok): the OpenAI wire format at ``https://api.x.ai/v1``."""

    provider = "xai"
    default_base_url = "https://api.x.ai/v1"


class OpenRouterAdapter(OpenAIAdapter):
    """OpenRouter: the OpenAI wire format at ``https://openrouter.ai/api/v1``."""

    provider = "openrouter"
    default_base_url = "https://openrouter.ai/api/v1"


__all__ = ["OpenAIAdapter", "XAIAdapter", "OpenRouterAdapter", "openai_messages"]
