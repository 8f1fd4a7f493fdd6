"""The chat agent's errors: one small hierarchy, stable codes.

| class | code | HTTP (``serve``) |
|---|---|---|
| :class:`ChatConfigError` | ``chat_config_invalid`` | (raised at creation) |
| :class:`InvalidMessage` | ``chat_message_invalid`` | 400 |
| :class:`MessageTooLarge` | ``chat_message_too_large`` | 413 |
| :class:`ChatClosed` | ``chat_closed`` | 503 |
"""

from __future__ import annotations

from openfunctions.core import OpenFunctionsError


class ChatError(OpenFunctionsError):
    """Root of the chat agent's errors."""

    code = "chat_error"


class ChatConfigError(ChatError):
    """The configuration cannot be resolved (unknown key, provider, preset, tool, provider module); the message names it."""

    code = "chat_config_invalid"


class InvalidMessage(ChatError):
    """A chat message is missing, not a string, or blank."""

    code = "chat_message_invalid"


class MessageTooLarge(ChatError):
    """A chat message is longer than the agent's ``max_message_chars``."""

    code = "chat_message_too_large"


class ChatClosed(ChatError):
    """The agent was destroyed; create a new one."""

    code = "chat_closed"


__all__ = ["ChatClosed", "ChatConfigError", "ChatError", "InvalidMessage", "MessageTooLarge"]
