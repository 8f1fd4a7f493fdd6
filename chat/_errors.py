"""The chat agent's errors: one small hierarchy, stable codes.

| class | code | HTTP (``serve``) |
|---|---|---|
| :class:`ChatConfigError` | ``chat_config_invalid`` | (raised at creation) |
| :class:`InvalidMessage` | ``chat_message_invalid`` | 400 |
| :class:`MessageTooLarge` | ``chat_message_too_large`` | 413 |
| :class:`ChatClosed` | ``chat_closed`` | 503 |
| :class:`InvalidConversation` | ``chat_conversation_invalid`` | 400 |
| :class:`ConversationNotFound` | ``chat_conversation_not_found`` | 404 |
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


class InvalidConversation(ChatError):
    """A conversation id that is not a string of the form this agent issues (``conv_`` + 32 characters)."""

    code = "chat_conversation_invalid"


class ConversationNotFound(ChatError):
    """A well-formed conversation id this agent does not hold (never issued, evicted, created by another principal, or with memory off from before a restart)."""

    code = "chat_conversation_not_found"


__all__ = ["ChatClosed", "ChatConfigError", "ChatError", "ConversationNotFound", "InvalidConversation", "InvalidMessage",
           "MessageTooLarge"]
