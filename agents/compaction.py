"""Compaction, shared by the engine's sessions and the chat agent: a token estimate and a summary step.

*How many tokens a conversation costs a model, estimated without calling it.* The engine compacts a
session when the estimate passes ``--context-ceiling``, and the chat agent a conversation when it passes
``context_ceiling``, so the estimate must be cheap (it runs before every model call) and err on the high side. No tokenizer is shipped: each
adapter family gets a characters-per-token ratio measured on English prose and code, and anything
unknown falls back to the common rule of thumb, four characters a token.

==========================================================  =====================
adapter ``provider``                                        characters per token
==========================================================  =====================
``anthropic``                                               3.5
``openai``, ``openai-responses``, ``xai``, ``openrouter``   4.0
``gemini``                                                  4.0
``deepseek``, ``kimi``                                      3.6
anything else (``scripted``, a sampling host)               4.0
==========================================================  =====================

Each message adds :data:`MESSAGE_OVERHEAD` tokens (role, separators) and each tool call its name and
arguments as JSON. Tool definitions are counted once per call, from their JSON schema.

*The summary step* (:func:`summarise`): the older messages are rendered as a plain transcript (its last
:data:`SUMMARY_INPUT_CHARS` characters) and the model is asked, with :data:`SUMMARY_SYSTEM` and no tools,
to summarise it. Where the summary is kept and which messages it replaces is the caller's: each cuts only
at a boundary that keeps every tool call with its result.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from openfunctions.adapters import ChatOptions, Message

CHARS_PER_TOKEN: dict[str, float] = {
    "anthropic": 3.5, "openai": 4.0, "openai-responses": 4.0, "xai": 4.0, "openrouter": 4.0, "gemini": 4.0,
    "deepseek": 3.6, "kimi": 3.6,
}
DEFAULT_CHARS_PER_TOKEN = 4.0
MESSAGE_OVERHEAD = 4


def chars_per_token(provider: str | None) -> float:
    return CHARS_PER_TOKEN.get(provider or "", DEFAULT_CHARS_PER_TOKEN)


def message_chars(message: Any) -> int:
    """The characters a message contributes (its text, its tool calls' names and arguments)."""
    n = len(message.content)
    for call in message.tool_calls:
        n += len(call.name) + len(json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":")))
    return n


def tools_chars(tools: Iterable[Any]) -> int:
    return sum(len(t.name) + len(t.description or "") + len(json.dumps(t.input_schema, separators=(",", ":")))
               for t in tools)


def estimate(provider: str | None, chars: int, messages: int) -> int:
    """Tokens for ``chars`` characters in ``messages`` messages, for ``provider``'s family (see the module doc)."""
    return math.ceil(chars / chars_per_token(provider)) + MESSAGE_OVERHEAD * messages


def estimate_messages(provider: str | None, messages: Sequence[Any], extra_chars: int = 0) -> int:
    return estimate(provider, sum(message_chars(m) for m in messages) + extra_chars, len(messages))


#: The transcript a summarisation request shows the model is cut to its last this many characters.
SUMMARY_INPUT_CHARS = 200_000
SUMMARY_SYSTEM = ("Summarise the conversation below for your own later use: the task, what was decided, what "
                  "was done (tool calls and their outcomes), what is still open. Be complete and brief; plain text.")


def render(m: Message) -> str:
    """One message as a line of the transcript the summary request shows (its tool calls below it)."""
    text = f"[{m.role}{' ' + m.name if m.name else ''}] {m.content}"
    for c in m.tool_calls:
        text += f"\n  call {c.name}({json.dumps(c.arguments, ensure_ascii=False)})"
    return text


async def summarise(adapter: Any, messages: Sequence[Message], *, max_tokens: int) -> str:
    """The model's summary of ``messages`` (stripped; ``""`` when it answered with no text).

    The adapter's errors (:class:`~openfunctions.core.OpenFunctionsError`) are raised as they are: the
    caller decides what a failed summary means (the engine reports it and carries on uncompacted)."""
    transcript = "\n\n".join(render(m) for m in messages)[-SUMMARY_INPUT_CHARS:]
    reply = await adapter.chat([Message.system(SUMMARY_SYSTEM), Message.user(transcript)], (),
                               ChatOptions(max_tokens=max_tokens))
    return (reply.text or "").strip()


__all__ = ["CHARS_PER_TOKEN", "DEFAULT_CHARS_PER_TOKEN", "MESSAGE_OVERHEAD", "SUMMARY_INPUT_CHARS", "SUMMARY_SYSTEM",
           "chars_per_token", "estimate", "estimate_messages", "message_chars", "render", "summarise", "tools_chars"]
