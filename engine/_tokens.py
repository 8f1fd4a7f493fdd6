"""The engine's token estimate: the agents tier's (:mod:`openfunctions.agents.compaction`, where the
per-adapter table is documented), which the chat agent's compaction uses too."""

from __future__ import annotations

from openfunctions.agents.compaction import (
    CHARS_PER_TOKEN,
    DEFAULT_CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD,
    chars_per_token,
    estimate,
    estimate_messages,
    message_chars,
    tools_chars,
)

__all__ = ["CHARS_PER_TOKEN", "DEFAULT_CHARS_PER_TOKEN", "MESSAGE_OVERHEAD", "chars_per_token", "estimate",
           "estimate_messages", "message_chars", "tools_chars"]
