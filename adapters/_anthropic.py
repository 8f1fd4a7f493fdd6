"""Anthropic Messages API wire format.

Request: ``POST {base}/v1/messages`` with headers ``x-api-key`` and
``anthropic-version: 2023-06-01``; body ``model``, ``max_tokens``, ``system``,
``messages`` (content blocks: ``text``, ``tool_use {id, name, input}``, and
``tool_result {tool_use_id, content, is_error}`` in a user turn), ``tools``
(``{name, description, input_schema}``). Reply: ``content`` blocks,
``stop_reason`` (``end_turn``, ``tool_use``, ``max_tokens``,
``stop_sequence``), ``usage.{input_tokens, output_tokens}``. A stream sends
named events: ``message_start``, ``content_block_start``,
``content_block_delta`` (``text_delta`` / ``input_json_delta``),
``content_block_stop``, ``message_delta`` (stop reason, output tokens),
``message_stop``, ``ping``, ``error``.

Extended thinking (``ChatOptions.thinking_budget`` sends ``thinking:
{type: "enabled", budget_tokens}`` and leaves ``temperature`` out, which
thinking does not accept): a reply's ``thinking`` blocks (text and
``signature``; streamed as ``thinking_delta`` / ``signature_delta``) and
``redacted_thinking`` blocks (``data``) are kept on ``ChatReply.parts`` and
replayed unchanged, in their order, at the start of that assistant turn,
before its text and ``tool_use`` blocks: Anthropic refuses a tool-result turn
whose preceding thinking was dropped or altered. Another provider's blocks
are never sent here. When the request continues a tool-use turn that has no
thinking block (it came from another provider, or was made without
thinking), Anthropic refuses thinking for it: that one request goes without
``thinking`` (:func:`thinking_allowed`); the next user turn has it again.

History (see ``._history``): results follow their calls, unanswered calls
get a "not run" result, and a call id outside ``[A-Za-z0-9_-]`` is sent
hashed. A user message sent mid-tool-turn joins the results' user turn,
after the ``tool_result`` blocks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from openfunctions.core import ToolDefinition, to_anthropic

from ._errors import MalformedResponse, ModelProviderUnavailable
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
    "end_turn": "end_turn", "tool_use": "tool_use", "max_tokens": "max_tokens", "stop_sequence": "stop_sequence",
    "refusal": "content_filter",
}
_THINKING = ("thinking", "redacted_thinking")
_CHOICE = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}


def anthropic_messages(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    messages = replay_history(messages, "anthropic", safe_ids=True)
    system = "\n\n".join(m.content for m in messages if m.role == "system") or None
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            block = {"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content, "is_error": m.is_error}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif m.role == "assistant":
            blocks = [b for b in parts_of(m.parts, "anthropic") if b.get("type") in _THINKING]
            if m.content:
                blocks.append({"type": "text", "text": m.content})
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in m.tool_calls]
            out.append({"role": "assistant", "content": blocks})
        elif out and out[-1]["role"] == "user" and out[-1]["content"][-1].get("type") == "tool_result":
            # a user message sent mid-tool-turn: it joins the results' turn, after them (tool_result blocks come first)
            out[-1]["content"].append({"type": "text", "text": m.content})
        else:
            out.append({"role": "user", "content": [{"type": "text", "text": m.content}]})
    return system, out


def thinking_allowed(msgs: list[dict[str, Any]]) -> bool:
    """Whether extended thinking may be on for this request: Anthropic refuses it when the tool-use turn the
    request continues has no thinking block first (a turn another provider, or a request without thinking, made)."""
    for m in reversed(msgs):
        if m["role"] == "assistant":
            blocks = m["content"]
            if not any(b.get("type") == "tool_use" for b in blocks):
                return True
            return bool(blocks) and blocks[0].get("type") in _THINKING
        if not any(b.get("type") == "tool_result" for b in m["content"]):
            return True  # a new user turn: the model starts a fresh assistant turn
    return True


class AnthropicAdapter(HttpAdapter):
    provider = "anthropic"
    default_base_url = "https://api.anthropic.com"

    def _url(self, stream: bool) -> str:
        return f"{self.base_url}/v1/messages"

    def _headers(self) -> dict[str, str]:
        return {"x-api-key": self.api_key or "", "anthropic-version": "2023-06-01", "content-type": "application/json"}

    def _body(self, messages: Sequence[Message], tools: Sequence[ToolDefinition], opts: ChatOptions, stream: bool) -> dict[str, Any]:
        system, msgs = anthropic_messages(messages)
        body: dict[str, Any] = {"model": self.model, "max_tokens": opts.max_tokens, "messages": msgs}
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [to_anthropic(t) for t in tools]
            if opts.tool_choice:
                body["tool_choice"] = _CHOICE[opts.tool_choice]
        thinking = bool(opts.thinking_budget) and thinking_allowed(msgs)
        if opts.temperature is not None and not thinking:  # with thinking on, only the default is accepted
            body["temperature"] = opts.temperature
        if opts.stop:
            body["stop_sequences"] = list(opts.stop)
        if thinking:
            body["thinking"] = {"type": "enabled", "budget_tokens": opts.thinking_budget}
        if stream:
            body["stream"] = True
        return body

    def _parse(self, data: Any) -> ChatReply:
        texts, calls, parts = [], [], []
        for b in data["content"]:
            if b["type"] == "text":
                texts.append(b["text"])
            elif b["type"] == "tool_use":
                calls.append(ToolCall(id=b["id"], name=b["name"], arguments=parse_arguments(b.get("input"), where=self.provider)))
            elif b["type"] in _THINKING:
                parts.append(ProviderPart("anthropic", b))
        usage = data.get("usage") or {}
        stop = data.get("stop_reason")
        return ChatReply(
            text="".join(texts) if texts else None,
            tool_calls=tuple(calls),
            model=data.get("model") or self.model,
            stop_reason="tool_use" if calls else _STOP.get(stop, "other"),
            raw_stop_reason=stop,
            usage=Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)),
            provider=self.provider,
            parts=tuple(parts),
        )

    def _stream_parser(self) -> StreamParser:
        return _AnthropicStream(self)


class _AnthropicStream(StreamParser):
    def __init__(self, adapter: AnthropicAdapter) -> None:
        self.adapter = adapter
        self.model = adapter.model
        self.blocks: dict[int, dict[str, Any]] = {}
        self.stop: str | None = None
        self.input_tokens = 0
        self.output_tokens = 0
        self.done = False

    def feed(self, event: str | None, data: str) -> list[StreamEvent]:
        obj = json.loads(data)
        kind = obj.get("type") or event
        if kind == "error":
            err = obj.get("error") or {}
            raise ModelProviderUnavailable(f"anthropic reported an error mid-stream: {err.get('type')}: {err.get('message')}",
                                           details={"provider": "anthropic"})
        if kind == "message_start":
            msg = obj["message"]
            self.model = msg.get("model") or self.model
            self.input_tokens = int((msg.get("usage") or {}).get("input_tokens") or 0)
        elif kind == "content_block_start":
            block = dict(obj["content_block"])
            block["_json"] = ""
            self.blocks[int(obj["index"])] = block
        elif kind == "content_block_delta":
            block = self.blocks[int(obj["index"])]
            delta = obj["delta"]
            if delta["type"] == "text_delta":
                block["text"] = block.get("text", "") + delta["text"]
                return [StreamEvent("text", text=delta["text"])]
            if delta["type"] == "input_json_delta":
                block["_json"] += delta.get("partial_json", "")
            elif delta["type"] == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = block.get("signature", "") + delta["signature"]
        elif kind == "message_delta":
            self.stop = (obj.get("delta") or {}).get("stop_reason") or self.stop
            self.output_tokens = int((obj.get("usage") or {}).get("output_tokens") or self.output_tokens)
        elif kind == "message_stop":
            self.done = True
        return []

    def finish(self) -> ChatReply:
        if not self.done:
            raise MalformedResponse("anthropic stream ended without message_stop", details={"provider": "anthropic"})
        texts, calls, parts = [], [], []
        for _, b in sorted(self.blocks.items()):
            if b["type"] == "text":
                texts.append(b.get("text", ""))
            elif b["type"] == "tool_use":
                args = parse_arguments(b["_json"], where="anthropic") if b["_json"] else dict(b.get("input") or {})
                calls.append(ToolCall(id=b["id"], name=b["name"], arguments=args))
            elif b["type"] in _THINKING:
                parts.append(ProviderPart("anthropic", {k: v for k, v in b.items() if k != "_json"}))
        return ChatReply(
            text="".join(texts) if texts else None,
            tool_calls=tuple(calls),
            model=self.model,
            stop_reason="tool_use" if calls else _STOP.get(self.stop, "other"),
            raw_stop_reason=self.stop,
            usage=Usage(self.input_tokens, self.output_tokens),
            provider="anthropic",
            parts=tuple(parts),
        )


__all__ = ["AnthropicAdapter", "anthropic_messages"]
