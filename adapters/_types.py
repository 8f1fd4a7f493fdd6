"""The normalized conversation and reply types every adapter speaks.

A conversation is a list of :class:`Message`. An adapter answers one
:class:`ChatReply`: either text, or one or more :class:`ToolCall` (id, name,
arguments), plus the model that answered, a normalized stop reason and the
token usage. Streaming yields :class:`StreamEvent` items and ends with one
``done`` event carrying the same :class:`ChatReply` ``chat`` would return.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from openfunctions.core import ToolDefinition

from ._text import valid_json, valid_text

Role = Literal["system", "user", "assistant", "tool"]

#: Normalized stop reasons. A provider's own value is kept in ``ChatReply.raw_stop_reason``.
StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "content_filter", "other"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool the model asked to run. ``id`` pairs it with its result message."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:  # a model's text: made valid where it enters (see ._text)
        object.__setattr__(self, "id", valid_text(self.id))
        object.__setattr__(self, "name", valid_text(self.name))
        object.__setattr__(self, "arguments", valid_json(self.arguments))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation turn.

    - ``system``/``user``: ``content`` text.
    - ``assistant``: ``content`` text and/or ``tool_calls``.
    - ``tool``: the result of the call ``tool_call_id`` (tool ``name``) as
      ``content`` text; ``is_error`` when the call failed.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False

    @classmethod
    def system(cls, text: str) -> Message:
        return cls("system", text)

    @classmethod
    def user(cls, text: str) -> Message:
        return cls("user", text)

    @classmethod
    def assistant(cls, text: str = "", tool_calls: Sequence[ToolCall] = ()) -> Message:
        return cls("assistant", text, tuple(tool_calls))

    @classmethod
    def tool_result(cls, call: ToolCall, text: str, *, is_error: bool = False) -> Message:
        return cls("tool", text, tool_call_id=call.id, name=call.name, is_error=is_error)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
            out["name"] = self.name
            out["is_error"] = self.is_error
        return out


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens)

    def to_dict(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


@dataclass(frozen=True, slots=True)
class ChatReply:
    """An adapter's normalized answer: text, or tool calls (never both empty)."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    model: str = ""
    stop_reason: StopReason = "end_turn"
    usage: Usage = Usage()
    provider: str = ""
    raw_stop_reason: str | None = None

    def __post_init__(self) -> None:  # a model's text: made valid where it enters (see ._text)
        if self.text is not None:
            object.__setattr__(self, "text", valid_text(self.text))
        object.__setattr__(self, "model", valid_text(self.model))
        if self.raw_stop_reason is not None:
            object.__setattr__(self, "raw_stop_reason", valid_text(self.raw_stop_reason))

    @property
    def kind(self) -> Literal["text", "tool_calls"]:
        return "tool_calls" if self.tool_calls else "text"

    def as_message(self) -> Message:
        """The assistant turn to append to the conversation."""
        return Message.assistant(self.text or "", self.tool_calls)


@dataclass(frozen=True, slots=True)
class ChatOptions:
    """Per-call options. ``timeout`` (seconds) bounds each HTTP request; ``None``: the adapter's default."""

    max_tokens: int = 1024
    temperature: float | None = None
    timeout: float | None = None
    tool_choice: Literal["auto", "required", "none"] | None = None
    stop: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """``text`` (a delta), ``tool_call`` (one complete call) or ``done`` (the whole reply, last)."""

    type: Literal["text", "tool_call", "done"]
    text: str = ""
    tool_call: ToolCall | None = None
    reply: ChatReply | None = None

    def __post_init__(self) -> None:  # a streamed delta: made valid where it enters (see ._text)
        object.__setattr__(self, "text", valid_text(self.text))


@runtime_checkable
class AIAdapter(Protocol):
    """The provider boundary. ``tools`` are the (filtered) registry's definitions."""

    provider: str
    model: str

    async def chat(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] = (), options: ChatOptions | None = None
    ) -> ChatReply: ...

    def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] = (), options: ChatOptions | None = None
    ) -> AsyncIterator[StreamEvent]: ...


async def stream_from_chat(reply: ChatReply) -> AsyncIterator[StreamEvent]:
    """The events of a whole reply (for adapters whose transport does not stream)."""
    if reply.text:
        yield StreamEvent("text", text=reply.text)
    for call in reply.tool_calls:
        yield StreamEvent("tool_call", tool_call=call)
    yield StreamEvent("done", reply=reply)


def parse_arguments(raw: Any, *, where: str) -> dict[str, Any]:
    """Tool-call arguments as a dict: providers send an object or a JSON string."""
    import json

    from ._errors import MalformedResponse

    if raw is None or raw == "":
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise MalformedResponse(f"{where}: tool-call arguments are not JSON ({exc}): {raw[:200]!r}") from None
        if isinstance(value, dict):
            return value
    raise MalformedResponse(f"{where}: tool-call arguments must be a JSON object, got {type(raw).__name__}")


__all__ = [
    "AIAdapter", "ChatOptions", "ChatReply", "Message", "Role", "StopReason", "StreamEvent", "ToolCall", "Usage",
    "parse_arguments", "stream_from_chat",
]
