"""The normalized conversation and reply types every adapter speaks.

A conversation is a list of :class:`Message`. An adapter answers one
:class:`ChatReply`: either text, or one or more :class:`ToolCall` (id, name,
arguments), plus the model that answered, a normalized stop reason and the
token usage. Streaming yields :class:`StreamEvent` items and ends with one
``done`` event carrying the same :class:`ChatReply` ``chat`` would return.

Provider state that must travel back unchanged. Reasoning models hand out
opaque pieces of an assistant turn and refuse the next tool turn without
them; the adapters keep them on the normalized types, tagged with the
provider that issued them, and replay them only to that provider:

- ``ProviderPart(provider, data)`` on ``ChatReply.parts`` / ``Message.parts``:
  one block of the assistant turn as the provider sent it. Anthropic:
  ``thinking`` (with ``signature``) and ``redacted_thinking`` blocks; Gemini:
  the turn's text parts when any carries a ``thoughtSignature`` or is a
  ``thought``; OpenAI Responses: ``reasoning`` items (with
  ``encrypted_content``) and ``message`` items; DeepSeek/Kimi:
  ``{"reasoning_content": ...}``.
- ``ToolCall.provider_data``: ``{provider: {...}}`` for one call. Gemini:
  ``{"gemini": {"thoughtSignature": ...}}``; OpenAI Responses:
  ``{"openai-responses": {"id": "fc_..."}}``.

JSON form (``Message.to_dict`` / ``Message.from_dict``, the same for
``ToolCall``): ``{"role", "content", "tool_calls"?: [{"id", "name",
"arguments", "provider_data"?}], "tool_call_id"?, "name"?, "is_error"?,
"parts"?: [{"provider", "data"}]}``; keys appear only when set, so a
conversation written before these fields existed reads back unchanged.
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


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a JSON object, got {type(value).__name__}")
    return dict(value)


@dataclass(frozen=True, slots=True)
class ProviderPart:
    """One opaque block of an assistant turn, replayed unchanged to ``provider`` (see the module docstring)."""

    provider: str
    data: dict[str, Any]

    def __post_init__(self) -> None:  # a provider's bytes: made valid where they enter (see ._text)
        object.__setattr__(self, "provider", valid_text(str(self.provider)))
        object.__setattr__(self, "data", valid_json(_mapping(self.data, "ProviderPart.data")))

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "data": self.data}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ProviderPart:
        raw = _mapping(raw, "a provider part")
        return cls(str(raw["provider"]), _mapping(raw["data"], "a provider part's data"))


def parts_of(parts: Sequence[ProviderPart], provider: str) -> list[dict[str, Any]]:
    """The blocks ``provider`` issued, in order (another provider's blocks are never sent to it)."""
    return [p.data for p in parts if p.provider == provider]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool the model asked to run. ``id`` pairs it with its result message.

    ``provider_data``: ``{provider: {...}}``, opaque per-call fields replayed to that provider only.
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    provider_data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:  # a model's text: made valid where it enters (see ._text)
        object.__setattr__(self, "id", valid_text(self.id))
        object.__setattr__(self, "name", valid_text(self.name))
        object.__setattr__(self, "arguments", valid_json(self.arguments))
        object.__setattr__(self, "provider_data", valid_json(_mapping(self.provider_data, "ToolCall.provider_data")))

    def for_provider(self, provider: str) -> dict[str, Any]:
        """This call's opaque fields for ``provider`` (empty when it issued none)."""
        data = self.provider_data.get(provider)
        return data if isinstance(data, dict) else {}

    def to_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.provider_data:
            out["provider_data"] = self.provider_data
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ToolCall:
        raw = _mapping(raw, "a tool call")
        return cls(str(raw["id"]), str(raw["name"]), _mapping(raw.get("arguments") or {}, "tool-call arguments"),
                   _mapping(raw.get("provider_data") or {}, "tool-call provider_data"))


@dataclass(frozen=True, slots=True)
class Message:
    """One conversation turn.

    - ``system``/``user``: ``content`` text.
    - ``assistant``: ``content`` text and/or ``tool_calls``.
    - ``tool``: the result of the call ``tool_call_id`` (tool ``name``) as
      ``content`` text; ``is_error`` when the call failed.

    ``parts``: the provider's opaque blocks of an assistant turn (see the module docstring).
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    parts: tuple[ProviderPart, ...] = ()

    @classmethod
    def system(cls, text: str) -> Message:
        return cls("system", text)

    @classmethod
    def user(cls, text: str) -> Message:
        return cls("user", text)

    @classmethod
    def assistant(cls, text: str = "", tool_calls: Sequence[ToolCall] = (), parts: Sequence[ProviderPart] = ()) -> Message:
        return cls("assistant", text, tuple(tool_calls), parts=tuple(parts))

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
        if self.parts:
            out["parts"] = [p.to_dict() for p in self.parts]
        return out

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Message:
        """The message :meth:`to_dict` wrote (a run record, a saved conversation); ``ValueError`` names a bad field."""
        try:
            raw = _mapping(raw, "a message")
            role = raw.get("role")
            if role not in ("system", "user", "assistant", "tool"):
                raise ValueError(f"role must be system, user, assistant or tool, got {role!r}")
            content = raw.get("content") or ""
            if not isinstance(content, str):
                raise TypeError(f"content must be a string, got {type(content).__name__}")
            call_id = raw.get("tool_call_id")
            name = raw.get("name")
            return cls(
                role, content,
                tuple(ToolCall.from_dict(c) for c in raw.get("tool_calls") or ()),
                None if call_id is None else str(call_id),
                None if name is None else str(name),
                bool(raw.get("is_error", False)),
                tuple(ProviderPart.from_dict(p) for p in raw.get("parts") or ()),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a message: {type(exc).__name__}: {exc}") from None


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
    #: The provider's opaque blocks of this turn, to replay (see the module docstring).
    parts: tuple[ProviderPart, ...] = ()

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
        return Message.assistant(self.text or "", self.tool_calls, self.parts)


@dataclass(frozen=True, slots=True)
class ChatOptions:
    """Per-call options. ``timeout`` (seconds) bounds each HTTP request; ``None``: the adapter's default.

    ``reasoning_effort`` (``"minimal"``, ``"low"``, ``"medium"``, ``"high"``, …) goes to the OpenAI-style
    adapters (Chat Completions ``reasoning_effort``, Responses ``reasoning.effort``, DeepSeek, Kimi);
    ``thinking_budget`` (tokens) turns on Anthropic's extended thinking (``budget_tokens``) and sets
    Gemini's ``thinkingBudget``. Each adapter ignores the one its provider has no field for.
    """

    max_tokens: int = 1024
    temperature: float | None = None
    timeout: float | None = None
    tool_choice: Literal["auto", "required", "none"] | None = None
    stop: tuple[str, ...] = ()
    reasoning_effort: str | None = None
    thinking_budget: int | None = None


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
    "AIAdapter", "ChatOptions", "ChatReply", "Message", "ProviderPart", "Role", "StopReason", "StreamEvent", "ToolCall",
    "Usage", "parse_arguments", "parts_of", "stream_from_chat",
]
