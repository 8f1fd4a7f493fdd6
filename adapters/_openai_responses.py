"""OpenAI Responses API wire format (``openai-responses:MODEL``).

Request: ``POST {base}/responses`` with ``model``, ``instructions`` (the
system text), ``input`` (items: ``{"role": "user", "content": text}``;
an assistant turn as the ``reasoning`` and ``message`` items it came with,
or ``{"role": "assistant", "content": text}``; ``{"type": "function_call",
"call_id", "name", "arguments"}``; ``{"type": "function_call_output",
"call_id", "output"}``), ``tools`` (``{"type": "function", "name",
"description", "parameters"}``), ``tool_choice``, ``max_output_tokens``,
``store: false`` and ``include: ["reasoning.encrypted_content"]`` (nothing is
kept on OpenAI's side, so each reasoning item comes back with its encrypted
content and is replayed as received on the next turn), ``reasoning:
{effort}`` from ``ChatOptions.reasoning_effort``; ``temperature`` only for a
model that is not a reasoning model (the same rule and ``reasoning=``
override as the Chat Completions adapter).

Reply: ``output`` items (``reasoning`` with ``encrypted_content``;
``message`` with ``content[].type == "output_text"``, or ``"refusal"``: then
the refusal is the text and the stop reason ``content_filter``; ``function_call``
with ``id``, ``call_id``, ``name``, ``arguments`` as a JSON string),
``status`` (``completed``, ``incomplete`` with ``incomplete_details.reason``
``max_output_tokens`` or ``content_filter``, ``failed`` with ``error``),
``usage.{input_tokens, output_tokens}``, ``model``. ``ToolCall.id`` is the
``call_id``; the item ``id`` is kept on ``ToolCall.provider_data``; the
``reasoning`` and ``message`` items on ``ChatReply.parts``.

A stream (``stream: true``) sends named events: ``response.output_text.delta``
(``delta``), ``response.output_item.done`` (``item``), and one of
``response.completed`` / ``response.incomplete`` / ``response.failed``
(``response``: the whole response, parsed as above), or ``error``.

History (see ``._history``): each ``function_call`` is followed by its
``function_call_output`` (a "not run" one when the history has none);
another provider's blocks are never sent; an assistant turn whose text was
changed after the reply goes without its ``message`` items, and without its
``reasoning`` items too when it made no call (a reasoning item is refused
without the item that followed it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from openfunctions.core import ToolDefinition, to_openai

from ._errors import MalformedResponse, ModelProviderUnavailable
from ._history import replay_history
from ._http import HttpAdapter, StreamParser
from ._openai import is_reasoning_model
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

PROVIDER = "openai-responses"
_KEPT = ("reasoning", "message")
_INCOMPLETE: dict[str | None, StopReason] = {"max_output_tokens": "max_tokens", "content_filter": "content_filter"}


def _message_text(item: dict[str, Any]) -> str:
    return "".join(c.get("text") or "" for c in item.get("content") or [] if c.get("type") == "output_text")


def _refusal(item: dict[str, Any]) -> str:
    return "".join(c.get("refusal") or "" for c in item.get("content") or [] if c.get("type") == "refusal")


def responses_input(messages: Sequence[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """``(instructions, input items)`` for a conversation (see the module docstring)."""
    messages = replay_history(messages, PROVIDER)
    instructions = "\n\n".join(m.content for m in messages if m.role == "system") or None
    items: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            items.append({"type": "function_call_output", "call_id": m.tool_call_id, "output": m.content})
        elif m.role == "assistant":
            kept = [dict(p) for p in parts_of(m.parts, PROVIDER) if p.get("type") in _KEPT]
            said = "".join(_message_text(p) for p in kept if p["type"] == "message")
            if said != m.content:  # the text was changed after the reply: its message items no longer say it
                kept = [p for p in kept if p["type"] != "message"]
                if not m.tool_calls:  # a reasoning item is refused without the output item that followed it
                    kept = []
                if m.content:
                    kept.append({"role": "assistant", "content": m.content})
            items += kept
            for c in m.tool_calls:
                item: dict[str, Any] = {"type": "function_call", "call_id": c.id, "name": c.name,
                                        "arguments": json.dumps(c.arguments)}
                item_id = c.for_provider(PROVIDER).get("id")
                if item_id is not None:
                    item["id"] = item_id
                items.append(item)
        else:
            items.append({"role": "user", "content": m.content})
    return instructions, items


def _tool(t: ToolDefinition) -> dict[str, Any]:
    return {"type": "function", **to_openai(t)["function"]}


def responses_reply(data: Any, model: str) -> ChatReply:
    """A ``ChatReply`` from one Responses API response object."""
    status = data.get("status")
    if status == "failed" or data.get("error"):
        err = data.get("error") or {}
        raise ModelProviderUnavailable(f"{PROVIDER} reported a failed response: {err.get('code')}: {err.get('message')}",
                                       details={"provider": PROVIDER})
    texts: list[str] = []
    calls: list[ToolCall] = []
    parts: list[ProviderPart] = []
    refusals: list[str] = []
    for item in data["output"]:
        kind = item["type"]
        if kind == "function_call":
            calls.append(ToolCall(id=item["call_id"], name=item["name"],
                                  arguments=parse_arguments(item.get("arguments"), where=PROVIDER),
                                  provider_data={PROVIDER: {"id": item["id"]}} if item.get("id") else {}))
        elif kind in _KEPT:
            parts.append(ProviderPart(PROVIDER, item))
            if kind == "message":
                texts.append(_message_text(item))
                refusals.append(_refusal(item))
    reason = (data.get("incomplete_details") or {}).get("reason")
    usage = data.get("usage") or {}
    stop: StopReason = "tool_use" if calls else (_INCOMPLETE.get(reason, "other") if status == "incomplete" else "end_turn")
    refused = "".join(refusals)
    if refused and not calls and not "".join(texts):  # the model declined: its refusal is the text, the stop says why
        texts, stop = [refused], "content_filter"
    return ChatReply(
        text="".join(texts) if texts else None,
        tool_calls=tuple(calls),
        model=data.get("model") or model,
        stop_reason=stop,
        raw_stop_reason=reason or status,
        usage=Usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)),
        provider=PROVIDER,
        parts=tuple(parts),
    )


class OpenAIResponsesAdapter(HttpAdapter):
    """OpenAI's Responses API: reasoning items carried across tool turns (see the module docstring)."""

    provider = PROVIDER
    default_base_url = "https://api.openai.com/v1"

    def __init__(self, *, reasoning: bool | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.reasoning = reasoning if reasoning is not None else is_reasoning_model(self.model)

    def _url(self, stream: bool) -> str:
        return f"{self.base_url}/responses"

    def _headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}", "content-type": "application/json"}

    def _body(self, messages: Sequence[Message], tools: Sequence[ToolDefinition], opts: ChatOptions, stream: bool) -> dict[str, Any]:
        instructions, items = responses_input(messages)
        body: dict[str, Any] = {"model": self.model, "input": items, "max_output_tokens": opts.max_tokens,
                                "store": False, "include": ["reasoning.encrypted_content"]}
        if instructions:
            body["instructions"] = instructions
        if tools:
            body["tools"] = [_tool(t) for t in tools]
            if opts.tool_choice:
                body["tool_choice"] = opts.tool_choice
        if opts.temperature is not None and not self.reasoning:
            body["temperature"] = opts.temperature
        if opts.reasoning_effort:
            body["reasoning"] = {"effort": opts.reasoning_effort}
        if stream:
            body["stream"] = True
        return body

    def _parse(self, data: Any) -> ChatReply:
        return responses_reply(data, self.model)

    def _stream_parser(self) -> StreamParser:
        return _ResponsesStream(self.model)


class _ResponsesStream(StreamParser):
    def __init__(self, model: str) -> None:
        self.model = model
        self.items: list[dict[str, Any]] = []
        self.final: dict[str, Any] | None = None

    def feed(self, event: str | None, data: str) -> list[StreamEvent]:
        obj = json.loads(data)
        kind = obj.get("type") or event
        if kind == "error":
            raise ModelProviderUnavailable(f"{PROVIDER} reported an error mid-stream: {obj.get('code')}: {obj.get('message')}",
                                           details={"provider": PROVIDER})
        if kind == "response.output_text.delta" and obj.get("delta"):
            return [StreamEvent("text", text=obj["delta"])]
        if kind == "response.output_item.done":
            self.items.append(obj["item"])
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self.final = dict(obj["response"])
        return []

    def finish(self) -> ChatReply:
        if self.final is None:
            raise MalformedResponse(f"{PROVIDER} stream ended without response.completed", details={"provider": PROVIDER})
        if not self.final.get("output"):  # some servers leave the whole output to the item events
            self.final["output"] = self.items
        return responses_reply(self.final, self.model)


__all__ = ["OpenAIResponsesAdapter", "responses_input", "responses_reply"]
