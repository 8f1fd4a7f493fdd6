"""OpenAI Chat Completions wire format: OpenAI, and xAI, OpenRouter, DeepSeek and Kimi at their own base URLs.

Request: ``POST {base}/chat/completions`` with ``model``, ``messages``
(``system``/``user``/``assistant`` with ``tool_calls``/``tool`` with
``tool_call_id``), ``tools`` (``{"type": "function", "function": ...}``),
``max_tokens``; streamed with ``stream: true`` and
``stream_options.include_usage``. Reply: ``choices[0].message`` (``content``,
``tool_calls[].function.{name, arguments}`` where arguments is a JSON
string), ``finish_reason``, ``usage.{prompt_tokens, completion_tokens}``.
A stream sends ``data: {chunk}`` lines (tool-call arguments arrive as string
fragments keyed by ``index``) and ends with ``data: [DONE]``.

Reasoning models (OpenAI's o-series and gpt-5 family) take
``max_completion_tokens`` instead of ``max_tokens`` and refuse the sampling
parameters (``temperature``, ``stop``): for them the adapter sends the
former and leaves the latter out. Which models: ``OpenAIAdapter(reasoning=)``
decides when given; otherwise :func:`is_reasoning_model` (a name, after any
``org/`` prefix, that starts ``o`` + digit, e.g. ``o1``, ``o3-mini``,
``o4-mini``, or ``gpt-5`` but not ``gpt-5-chat``; the name rule applies to
the ``openai`` provider only: the compatible providers keep ``max_tokens``).
``ChatOptions.reasoning_effort`` is sent as ``reasoning_effort``.

``reasoning_content`` (DeepSeek's and Kimi's thinking text, beside
``content``; streamed as ``delta.reasoning_content``) never joins the
visible text; it is kept on ``ChatReply.parts`` as
``{"reasoning_content": ...}`` under the provider's name. Per DeepSeek's
thinking-mode guide (and Kimi's), an assistant turn that made tool calls
must carry its ``reasoning_content`` back in every later request, while one
without tool calls must not (it is dropped: the API ignores it, and the
older ``deepseek-reasoner`` refuses it with 400). Providers that replay it:
``deepseek`` and ``kimi`` (``replay_reasoning_content``); the others never
send it.

History (see ``._history``): an assistant message with ``tool_calls`` is
followed at once by one ``tool`` message per call, in order (a "not run"
one when the history has none); a ``tool`` message whose call is not in the
history is left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from openfunctions.core import ToolDefinition, to_openai

from ._errors import MalformedResponse
from ._history import replay_history
from ._http import HttpAdapter, StreamParser
from ._types import (
    ChatOptions,
    ChatReply,
    Message,
    ProviderPart,
    StopReason,
    StreamEvent,
    ToolCall,
    Usage,
    parse_arguments,
    parts_of,
)

_STOP: dict[str | None, StopReason] = {
    "stop": "end_turn", "tool_calls": "tool_use", "function_call": "tool_use", "length": "max_tokens",
    "content_filter": "content_filter",
}


_REASONING_NAME = re.compile(r"^(o\d|gpt-5(?!-chat))")


def is_reasoning_model(model: str) -> bool:
    """OpenAI's name rule for a reasoning model: ``o`` + digit (``o1``, ``o3-mini``, ``o4-mini``) or ``gpt-5*``
    except ``gpt-5-chat*``, after any ``org/`` prefix, case-insensitive."""
    return _REASONING_NAME.match(model.rsplit("/", 1)[-1].lower()) is not None


def openai_messages(messages: Sequence[Message], *, reasoning_from: str | None = None,
                    provider: str = "openai") -> list[dict[str, Any]]:
    """Chat Completions messages. ``reasoning_from``: the provider whose ``reasoning_content`` goes back on
    assistant turns that made tool calls (see the module docstring); ``None``: never sent. ``provider``: the one
    the request goes to (its own calls keep their ids, see ``._history``)."""
    out: list[dict[str, Any]] = []
    for m in replay_history(messages, provider):
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.role == "assistant" and m.tool_calls:
            msg: dict[str, Any] = {
                "role": "assistant",
                "content": m.content or None,
                "tool_calls": [
                    {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                    for c in m.tool_calls
                ],
            }
            if reasoning_from is not None:
                thought = "".join(str(p.get("reasoning_content") or "") for p in parts_of(m.parts, reasoning_from))
                if thought:
                    msg["reasoning_content"] = thought
            out.append(msg)
        else:
            out.append({"role": m.role, "content": m.content})
    return out


class OpenAIAdapter(HttpAdapter):
    provider = "openai"
    default_base_url = "https://api.openai.com/v1"
    #: Whether the model-name rule (:func:`is_reasoning_model`) applies when ``reasoning=`` is not given.
    name_rule = True
    #: Whether ``reasoning_content`` goes back on assistant tool-call turns (DeepSeek, Kimi).
    replay_reasoning_content = False

    def __init__(self, *, reasoning: bool | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        #: A reasoning model: ``max_completion_tokens``, no ``temperature``/``stop`` (see the module docstring).
        self.reasoning = reasoning if reasoning is not None else (self.name_rule and is_reasoning_model(self.model))

    def _url(self, stream: bool) -> str:
        return f"{self.base_url}/chat/completions"

    def _headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}", "content-type": "application/json"}

    def _body(self, messages: Sequence[Message], tools: Sequence[ToolDefinition], opts: ChatOptions, stream: bool) -> dict[str, Any]:
        msgs = openai_messages(messages, reasoning_from=self.provider if self.replay_reasoning_content else None,
                               provider=self.provider)
        body: dict[str, Any] = {"model": self.model, "messages": msgs}
        body["max_completion_tokens" if self.reasoning else "max_tokens"] = opts.max_tokens
        if tools:
            body["tools"] = [to_openai(t) for t in tools]
            if opts.tool_choice:
                body["tool_choice"] = opts.tool_choice
        if opts.temperature is not None and not self.reasoning:
            body["temperature"] = opts.temperature
        if opts.stop and not self.reasoning:
            body["stop"] = list(opts.stop)
        if opts.reasoning_effort:
            body["reasoning_effort"] = opts.reasoning_effort
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
        thought = msg.get("reasoning_content")
        return ChatReply(
            text=msg.get("content"),
            tool_calls=calls,
            model=data.get("model") or self.model,
            stop_reason="tool_use" if calls else _STOP.get(finish, "other"),
            raw_stop_reason=finish,
            usage=Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)),
            provider=self.provider,
            parts=_reasoning_part(self.provider, thought),
        )

    def _stream_parser(self) -> StreamParser:
        return _OpenAIStream(self)


def _reasoning_part(provider: str, thought: Any) -> tuple[ProviderPart, ...]:
    return (ProviderPart(provider, {"reasoning_content": thought}),) if isinstance(thought, str) and thought else ()


class _OpenAIStream(StreamParser):
    def __init__(self, adapter: OpenAIAdapter) -> None:
        self.adapter = adapter
        self.text: list[str] = []
        self.thought: list[str] = []
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
            from ._errors import ModelProviderUnavailable
            from ._http import _provider_message

            raise ModelProviderUnavailable(f"{self.adapter.provider} reported an error mid-stream: "
                                           f"{_provider_message(data.encode())}", details={"provider": self.adapter.provider})
        self.model = chunk.get("model") or self.model
        if chunk.get("usage"):
            u = chunk["usage"]
            self.usage = Usage(int(u.get("prompt_tokens") or 0), int(u.get("completion_tokens") or 0))
        out: list[StreamEvent] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if isinstance(delta.get("reasoning_content"), str):
                self.thought.append(delta["reasoning_content"])
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
            parts=_reasoning_part(self.adapter.provider, "".join(self.thought)),
        )


class XAIAdapter(OpenAIAdapter):
    """xAI (Grok): the OpenAI wire format at ``https://api.x.ai/v1``."""

    provider = "xai"
    default_base_url = "https://api.x.ai/v1"
    name_rule = False


class OpenRouterAdapter(OpenAIAdapter):
    """OpenRouter: the OpenAI wire format at ``https://openrouter.ai/api/v1``."""

    provider = "openrouter"
    default_base_url = "https://openrouter.ai/api/v1"
    name_rule = False


class DeepSeekAdapter(OpenAIAdapter):
    """DeepSeek: the OpenAI wire format at ``https://api.deepseek.com``; ``reasoning_content`` handled
    as its thinking-mode guide asks (see the module docstring)."""

    provider = "deepseek"
    default_base_url = "https://api.deepseek.com"
    name_rule = False
    replay_reasoning_content = True


class KimiAdapter(OpenAIAdapter):
    """Kimi (Moonshot AI): the OpenAI wire format at ``https://api.moonshot.ai/v1``; ``reasoning_content``
    as for DeepSeek."""

    provider = "kimi"
    default_base_url = "https://api.moonshot.ai/v1"
    name_rule = False
    replay_reasoning_content = True


__all__ = [
    "DeepSeekAdapter", "KimiAdapter", "OpenAIAdapter", "OpenRouterAdapter", "XAIAdapter", "is_reasoning_model",
    "openai_messages",
]
