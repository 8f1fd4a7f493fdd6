"""How many tokens a conversation costs a model, estimated without calling it.

The engine compacts a session when the estimate passes ``--context-ceiling``, so the estimate must be
cheap (it runs before every model call) and err on the high side. No tokenizer is shipped: each
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
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

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


__all__ = ["CHARS_PER_TOKEN", "DEFAULT_CHARS_PER_TOKEN", "MESSAGE_OVERHEAD", "chars_per_token", "estimate",
           "estimate_messages", "message_chars", "tools_chars"]
