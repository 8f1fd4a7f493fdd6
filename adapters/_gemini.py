"""Gemini ``generateContent`` wire format (Google AI Studio, API key).

Request: ``POST {base}/v1beta/models/{model}:generateContent`` (streamed:
``:streamGenerateContent?alt=sse``) with header ``x-goog-api-key``; body
``contents`` (``role`` ``user``/``model``; parts ``text``,
``functionCall {name, args}``, ``functionResponse {name, response}``),
``systemInstruction``, ``tools [{functionDeclarations}]``,
``generationConfig``. Reply: ``candidates[0].content.parts``,
``finishReason`` (``STOP``, ``MAX_TOKENS``, ``SAFETY``, …),
``usageMetadata.{promptTokenCount, candidatesTokenCount}``,
``modelVersion``. A stream sends whole response chunks as ``data:`` lines,
the last one carrying ``finishReason``. Gemini function calls may carry no
id: the adapter numbers them (``call_<n>``) and pairs results by name; a
call that came with an ``id`` goes back with it, and so does its
``functionResponse``.

Thought signatures: a thinking model puts an opaque ``thoughtSignature`` on
a part (beside ``functionCall``, or on a text part) and refuses the next
function-calling turn unless it comes back exactly as received, on the same
part. A ``functionCall`` part's signature (and id) is kept on the call
(``ToolCall.provider_data["gemini"]``); when any non-call part carries one
(or is a ``thought`` part), the turn's non-call parts are kept whole on
``ChatReply.parts`` and replayed as they came (provided the message text is
still theirs), followed by the call parts with their signatures. ``thought``
parts are never part of the visible text. ``ChatOptions.thinking_budget``
sets ``generationConfig.thinkingConfig.thinkingBudget``.

A model turn that did not come from Gemini (another provider's history, a
conversation rebuilt without its signatures) has none to give back; Gemini 3
and later refuse its function calls, so for those models (a name
``gemini-<N>`` with N >= 3) the first unsigned ``functionCall`` part of each
such turn carries Google's documented ``skip_thought_signature_validator``
placeholder. A real signature is never replaced.

History (see ``._history``): every ``functionCall`` turn is answered by a
user turn of as many ``functionResponse`` parts (a "not run" one for a call
the history has no result for); another provider's blocks are never sent,
and an assistant turn left with nothing to send is left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from openfunctions.core import ToolDefinition, to_gemini

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
    "STOP": "end_turn", "MAX_TOKENS": "max_tokens", "SAFETY": "content_filter", "RECITATION": "content_filter",
    "PROHIBITED_CONTENT": "content_filter", "BLOCKLIST": "content_filter",
}
_MODE = {"auto": "AUTO", "required": "ANY", "none": "NONE"}
#: Google's placeholder for a function call whose signature is unknown (see the module docstring).
SKIP_SIGNATURE = "skip_thought_signature_validator"
_GENERATION = re.compile(r"^(?:models/)?gemini-(\d+)")


def needs_signatures(model: str) -> bool:
    """Gemini 3 and later refuse an unsigned function call in the history."""
    m = _GENERATION.match(model.lower())
    return m is not None and int(m.group(1)) >= 3


def gemini_contents(messages: Sequence[Message], *, placeholder: bool = False) -> tuple[str | None, list[dict[str, Any]]]:
    """``(systemInstruction text, contents)``; ``placeholder``: sign a turn's unsigned calls (see the module docstring)."""
    messages = replay_history(messages, "gemini")
    system = "\n\n".join(m.content for m in messages if m.role == "system") or None
    out: list[dict[str, Any]] = []
    issued_ids = {c.id for m in messages for c in m.tool_calls if c.for_provider("gemini").get("id") == c.id}
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            response: dict[str, Any] = {"name": m.name, "response": {"error" if m.is_error else "result": m.content}}
            if m.tool_call_id in issued_ids:  # Gemini named the call: the response names it back
                response = {"id": m.tool_call_id, **response}
            part = {"functionResponse": response}
            if out and out[-1]["role"] == "user" and all("functionResponse" in p for p in out[-1]["parts"]):
                out[-1]["parts"].append(part)
            else:
                out.append({"role": "user", "parts": [part]})
        elif m.role == "assistant":
            kept = parts_of(m.parts, "gemini")
            parts: list[dict[str, Any]]
            if kept and _visible_text(kept) == m.content:
                parts = [dict(p) for p in kept]  # exactly as received, signatures included
            else:
                parts = [{"text": m.content}] if m.content else []
            for c in m.tool_calls:
                issued = c.for_provider("gemini")
                fc: dict[str, Any] = {"name": c.name, "args": c.arguments}
                if issued.get("id") == c.id:
                    fc = {"id": c.id, **fc}
                call_part: dict[str, Any] = {"functionCall": fc}
                signature = issued.get("thoughtSignature")
                if signature is None and placeholder and not any("functionCall" in p for p in parts):
                    signature = SKIP_SIGNATURE
                if signature is not None:
                    call_part["thoughtSignature"] = signature
                parts.append(call_part)
            out.append({"role": "model", "parts": parts})
        else:
            out.append({"role": "user", "parts": [{"text": m.content}]})
    return system, out


def _visible_text(parts: list[dict[str, Any]]) -> str:
    return "".join(p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought"))


def _reply(chunks: list[dict[str, Any]], model: str) -> ChatReply:
    texts: list[str] = []
    calls: list[ToolCall] = []
    others: list[dict[str, Any]] = []
    finish = None
    usage: dict[str, Any] = {}
    for data in chunks:
        model = data.get("modelVersion") or model
        usage = data.get("usageMetadata") or usage
        for cand in (data.get("candidates") or [])[:1]:
            finish = cand.get("finishReason") or finish
            for p in (cand.get("content") or {}).get("parts") or []:
                if "functionCall" in p:
                    fc = p["functionCall"]
                    issued = {k: v for k, v in (("id", fc.get("id")), ("thoughtSignature", p.get("thoughtSignature")))
                              if v is not None}
                    calls.append(ToolCall(id=fc.get("id") or f"call_{len(calls)}", name=fc["name"],
                                          arguments=parse_arguments(fc.get("args"), where="gemini"),
                                          provider_data={"gemini": issued} if issued else {}))
                    continue
                others.append(p)
                if "text" in p and not p.get("thought"):
                    texts.append(p["text"])
    signed = any("thoughtSignature" in p or p.get("thought") for p in others)
    return ChatReply(
        text="".join(texts) if texts else None,
        tool_calls=tuple(calls),
        model=model,
        stop_reason="tool_use" if calls else _STOP.get(finish, "other"),
        raw_stop_reason=finish,
        usage=Usage(int(usage.get("promptTokenCount") or 0), int(usage.get("candidatesTokenCount") or 0)),
        provider="gemini",
        parts=tuple(ProviderPart("gemini", p) for p in others) if signed else (),
    )


class GeminiAdapter(HttpAdapter):
    provider = "gemini"
    default_base_url = "https://generativelanguage.googleapis.com"

    def _url(self, stream: bool) -> str:
        verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"{self.base_url}/v1beta/models/{self.model}:{verb}"

    def _headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self.api_key or "", "content-type": "application/json"}

    def _body(self, messages: Sequence[Message], tools: Sequence[ToolDefinition], opts: ChatOptions, stream: bool) -> dict[str, Any]:
        system, contents = gemini_contents(messages, placeholder=needs_signatures(self.model))
        config: dict[str, Any] = {"maxOutputTokens": opts.max_tokens}
        if opts.temperature is not None:
            config["temperature"] = opts.temperature
        if opts.stop:
            config["stopSequences"] = list(opts.stop)
        if opts.thinking_budget is not None:
            config["thinkingConfig"] = {"thinkingBudget": opts.thinking_budget}
        body: dict[str, Any] = {"contents": contents, "generationConfig": config}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        if tools:
            body["tools"] = [to_gemini(list(tools))]
            if opts.tool_choice:
                body["toolConfig"] = {"functionCallingConfig": {"mode": _MODE[opts.tool_choice]}}
        return body

    def _parse(self, data: Any) -> ChatReply:
        if not data.get("candidates"):
            reason = (data.get("promptFeedback") or {}).get("blockReason")
            raise MalformedResponse(f"gemini returned no candidates{f' (blocked: {reason})' if reason else ''}",
                                    details={"provider": "gemini"})
        return _reply([data], self.model)

    def _stream_parser(self) -> StreamParser:
        return _GeminiStream(self.model)


class _GeminiStream(StreamParser):
    def __init__(self, model: str) -> None:
        self.model = model
        self.chunks: list[dict[str, Any]] = []

    def feed(self, event: str | None, data: str) -> list[StreamEvent]:
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ValueError("a chunk is not an object")
        self.chunks.append(chunk)
        out = []
        for cand in (chunk.get("candidates") or [])[:1]:
            for p in (cand.get("content") or {}).get("parts") or []:
                if "text" in p and not p.get("thought") and p["text"]:
                    out.append(StreamEvent("text", text=p["text"]))
        return out

    def finish(self) -> ChatReply:
        if not any(c.get("finishReason") for ch in self.chunks for c in (ch.get("candidates") or [])):
            raise MalformedResponse("gemini stream ended without a finishReason", details={"provider": "gemini"})
        return _reply(self.chunks, self.model)


__all__ = ["SKIP_SIGNATURE", "GeminiAdapter", "gemini_contents", "needs_signatures"]
