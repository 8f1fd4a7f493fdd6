"""SamplingAdapter: the model is the connected MCP host's, through ``sampling/createMessage``.

Core and the agents never see MCP: the server layer lends each call a
:class:`~openfunctions.core.HostChannel` in ``ctx.host``:

- ``ctx.host.sampler``: an async callable taking the ``sampling/createMessage``
  params as a wire-form dict (camelCase) and returning the result as a
  wire-form dict (``await ctx.host.sample(params)`` calls it);
- ``ctx.host.sampling``: the client's declared ``sampling`` capability as a
  dict (``{"tools": {}}`` when it offers sampling with tools, the 2025-11-25
  form), or ``None``;
- ``ctx.host.sampling_timeout_s``: the host's deadline per request, or ``None``.

Deprecated fallback (read, never written, for one version): a context with no
``host`` is read from the metadata keys ``SAMPLER_KEY``
(``"openfunctions.sampler"``), ``SAMPLING_CAPABILITY_KEY``
(``"openfunctions.sampling"``) and ``SAMPLING_TIMEOUT_KEY``.

With tools (and a client that declared ``sampling.tools``) the request
carries ``tools`` and the conversation's tool turns as ``tool_use`` /
``tool_result`` content blocks (paired as every adapter pairs them, see
``._history``: a call without a result gets a "not run" one); otherwise it is
text-only (tools omitted, so the host's model answers in text). The sampler
is the server's: over a handshake-era session it sends a request to the
client; on 2026-07-28 it answers the call with an input-required result and
resumes on the client's retry (``servers._input_required``). A host that
declared no sampling gets :class:`SamplingUnavailable` saying so. MCP sampling reports no token usage:
``usage`` stays zero.

Deadline: every request waits at most ``timeout_s`` seconds (default
:data:`DEFAULT_SAMPLING_TIMEOUT_S`, 120; ``from_context`` takes the
caller's, else the host's ``ctx.host.sampling_timeout_s``; the agents runtime passes its own, ``serve --sampling-timeout``). A host that does not
answer in time gets the request cancelled (the MCP SDK sends it
``notifications/cancelled``) and the caller gets :class:`SamplingTimeout`:
a client that never answers cannot keep a run, or anything it holds, waiting.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import anyio

from openfunctions.core import OpenFunctionsError, ToolDefinition

from ._errors import AdapterError, MalformedResponse, SamplingTimeout, SamplingUnavailable
from ._history import replay_history
from ._types import (
    ChatOptions,
    ChatReply,
    Message,
    StopReason,
    StreamEvent,
    ToolCall,
    Usage,
    parse_arguments,
    stream_from_chat,
)

#: Deprecated metadata keys, read only when a context has no ``host`` (use ``ctx.host``).
SAMPLER_KEY = "openfunctions.sampler"
SAMPLING_CAPABILITY_KEY = "openfunctions.sampling"
SAMPLING_TIMEOUT_KEY = "openfunctions.sampling_timeout_s"
DEFAULT_SAMPLING_TIMEOUT_S = 120.0

Sampler = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]

_STOP: dict[str | None, StopReason] = {
    "endTurn": "end_turn", "toolUse": "tool_use", "maxTokens": "max_tokens", "stopSequence": "stop_sequence",
}


def sampling_messages(messages: Sequence[Message], with_tools: bool) -> tuple[str | None, list[dict[str, Any]]]:
    """(systemPrompt, messages) in MCP sampling form. Consecutive tool results share one user turn."""
    messages = replay_history(messages, "mcp-sampling")
    system = [m.content for m in messages if m.role == "system"]
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "system":
            continue
        if m.role == "tool":
            if not with_tools:  # text-only: the result becomes plain user text
                out.append({"role": "user", "content": {"type": "text", "text": f"[{m.name} result] {m.content}"}})
                continue
            block = {"type": "tool_result", "toolUseId": m.tool_call_id,
                     "content": [{"type": "text", "text": m.content}], "isError": m.is_error}
            prev = out[-1] if out else None
            if prev is not None and prev["role"] == "user" and isinstance(prev["content"], list) and all(
                b.get("type") == "tool_result" for b in prev["content"]
            ):
                prev["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif m.role == "assistant" and m.tool_calls and with_tools:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m.content}] if m.content else []
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments} for c in m.tool_calls]
            out.append({"role": "assistant", "content": blocks})
        else:
            out.append({"role": m.role, "content": {"type": "text", "text": m.content}})
    return ("\n\n".join(system) or None), out


class SamplingAdapter:
    """An :class:`AIAdapter` over a host's MCP sampling. Build it from a call's context with :meth:`from_context`."""

    provider = "mcp-sampling"

    def __init__(self, sampler: Sampler | None, capability: Mapping[str, Any] | None, *, model_hint: str | None = None,
                 timeout_s: float = DEFAULT_SAMPLING_TIMEOUT_S) -> None:
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ValueError(f"SamplingAdapter timeout_s must be a positive number of seconds, not {timeout_s!r}")
        self.sampler = sampler
        self.capability = capability
        self.model_hint = model_hint
        self.timeout_s = float(timeout_s)
        #: The model the host last named (``"host"`` until it answered).
        self.model = "host"

    @classmethod
    def from_context(cls, ctx: Any, *, model_hint: str | None = None, timeout_s: float | None = None) -> SamplingAdapter:
        """The host of the call ``ctx`` (``ctx.host``). ``timeout_s``: this caller's deadline per request; else
        the host's (``ctx.host.sampling_timeout_s``), else :data:`DEFAULT_SAMPLING_TIMEOUT_S`."""
        host = getattr(ctx, "host", None)
        if host is not None:
            if timeout_s is None:
                timeout_s = host.sampling_timeout_s or DEFAULT_SAMPLING_TIMEOUT_S
            return cls(host.sampler, host.sampling, model_hint=model_hint, timeout_s=timeout_s)
        meta = getattr(ctx, "metadata", None) or {}  # deprecated: a host that still writes the string keys
        if timeout_s is None:
            timeout_s = meta.get(SAMPLING_TIMEOUT_KEY) or DEFAULT_SAMPLING_TIMEOUT_S
        return cls(meta.get(SAMPLER_KEY), meta.get(SAMPLING_CAPABILITY_KEY), model_hint=model_hint, timeout_s=timeout_s)

    @property
    def supports_tools(self) -> bool:
        return isinstance(self.capability, Mapping) and self.capability.get("tools") is not None

    def _check(self) -> None:
        if self.sampler is None:
            raise SamplingUnavailable(
                "no MCP host to sample from: this call did not arrive over MCP; give the agent an adapter or a model"
            )
        if self.capability is None:
            raise SamplingUnavailable(
                "the MCP host does not offer sampling (its client declared no 'sampling' capability), so an agent "
                "served here cannot use the host's model; configure a provider model for the agent instead"
            )

    async def chat(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] = (), options: ChatOptions | None = None
    ) -> ChatReply:
        self._check()
        opts = options or ChatOptions()
        with_tools = bool(tools) and self.supports_tools
        system, msgs = sampling_messages(messages, with_tools)
        params: dict[str, Any] = {"messages": msgs, "maxTokens": opts.max_tokens}
        if system:
            params["systemPrompt"] = system
        if opts.temperature is not None:
            params["temperature"] = opts.temperature
        if opts.stop:
            params["stopSequences"] = list(opts.stop)
        if self.model_hint:
            params["modelPreferences"] = {"hints": [{"name": self.model_hint}]}
        if with_tools:
            params["tools"] = [{"name": t.name, "description": t.description, "inputSchema": t.input_schema} for t in tools]
            if opts.tool_choice:
                params["toolChoice"] = {"mode": opts.tool_choice}
        result = None
        try:
            # move_on_after, not fail_after: a TimeoutError raised by the sampler itself is not our deadline.
            with anyio.move_on_after(self.timeout_s) as scope:
                result = await self.sampler(params)  # type: ignore[misc]
        except OpenFunctionsError:
            raise
        except Exception as exc:
            raise AdapterError(f"the MCP host's sampling request failed: {type(exc).__name__}: {exc}",
                               details={"provider": self.provider}) from None
        if scope.cancelled_caught:
            raise SamplingTimeout(
                f"the MCP host did not answer the sampling request within {self.timeout_s:g} s; the request was "
                "cancelled", details={"provider": self.provider, "timeout_s": self.timeout_s},
            )
        return self._parse(result)

    async def stream(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition] = (), options: ChatOptions | None = None
    ) -> AsyncIterator[StreamEvent]:
        """MCP sampling does not stream: one ``done`` after the whole reply."""
        reply = await self.chat(messages, tools, options)
        async for event in stream_from_chat(reply):
            yield event

    def _parse(self, result: Any) -> ChatReply:
        if not isinstance(result, Mapping):
            raise MalformedResponse(f"the host's sampling result is not an object: {type(result).__name__}")
        content = result.get("content")
        blocks = content if isinstance(content, list) else [content]
        texts: list[str] = []
        calls: list[ToolCall] = []
        for b in blocks:
            if not isinstance(b, Mapping):
                raise MalformedResponse(f"the host's sampling result has a content block that is not an object: {b!r}")
            if b.get("type") == "text":
                texts.append(str(b.get("text", "")))
            elif b.get("type") == "tool_use":
                calls.append(ToolCall(id=str(b.get("id") or f"call_{len(calls)}"), name=str(b.get("name")),
                                      arguments=parse_arguments(b.get("input"), where="sampling")))
        if not texts and not calls:
            raise MalformedResponse("the host's sampling result holds neither text nor a tool call "
                                    f"(content types: {[getattr(b, 'get', lambda k: None)('type') for b in blocks]})")
        self.model = str(result.get("model") or self.model)
        stop = result.get("stopReason")
        return ChatReply(
            text="".join(texts) if texts else None,
            tool_calls=tuple(calls),
            model=self.model,
            stop_reason="tool_use" if calls else _STOP.get(stop, "other"),
            raw_stop_reason=stop,
            usage=Usage(),
            provider=self.provider,
        )


__all__ = ["DEFAULT_SAMPLING_TIMEOUT_S", "SAMPLER_KEY", "SAMPLING_CAPABILITY_KEY", "SAMPLING_TIMEOUT_KEY", "Sampler",
           "SamplingAdapter", "sampling_messages"]
