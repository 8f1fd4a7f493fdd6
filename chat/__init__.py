"""openfunctions.chat: one embeddable chat agent (adapter + filtered registry + memory + context providers).

Usage::

    from openfunctions.adapters import ScriptedAdapter
    from openfunctions.chat import open_chat_agent

    agent = await open_chat_agent({"adapter": ScriptedAdapter(["Hello!"]), "data_dir": "/tmp/chat"})
    reply = await agent.chat("hi")                     # ChatResponse: text, tool_calls (+ receipts), rounds, run_id
    async for event in agent.chat("again", stream=True):   # ChatEvent: tool_call, tool_result, text, done
        ...
    await agent.reset()                                # a new conversation; saved facts stay
    conv = await agent.open_conversation()             # another conversation (serve() issues one per client)
    await agent.chat("hello", conversation=conv)
    await agent.serve(port=8765)                       # POST /chat, /chat/stream (SSE), GET /health, POST /reset, GET /
    await agent.destroy()

Without ``adapter``/``provider``/``model`` the provider comes from the environment
(ANTHROPIC_API_KEY, OPENAI_API_KEY, ...). Every turn is a run of the chat's agent
through the registry's executor and leaves run records. See docs/CHAT.md;
from the shell: ``openfunctions-mcp chat`` (``--serve`` to serve it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openfunctions.core.deprecation import old_names

from ._agent import ChatAgent, ChatEvent, ChatResponse, open_chat_agent, scripted_adapter_from_file
from ._config import MAX_MESSAGE_CHARS, ChatConfig
from ._conversations import MAX_CONVERSATIONS
from ._errors import (
    ChatClosed,
    ChatConfigError,
    ChatError,
    ConversationNotFound,
    InvalidConversation,
    InvalidMessage,
    MessageTooLarge,
)
from ._http import CONVERSATION_HEADER, MAX_BODY_BYTES, create_chat_app
from ._prompt import PRESETS, resolve_prompt

__all__ = [
    "CONVERSATION_HEADER", "MAX_BODY_BYTES", "MAX_CONVERSATIONS", "MAX_MESSAGE_CHARS", "PRESETS", "ChatAgent",
    "ChatClosed", "ChatConfig", "ChatConfigError", "ChatError", "ChatEvent", "ConversationNotFound",
    "InvalidConversation", "ChatResponse", "InvalidMessage", "MessageTooLarge", "open_chat_agent",
    "create_chat_app", "resolve_prompt", "scripted_adapter_from_file",
]


# Old names of renamed functions, kept for one release outside __all__: each use warns (core/deprecation.py).
_RENAMED = {"create_chat_agent": "open_chat_agent"}

if not TYPE_CHECKING:  # hidden from mypy: a module __getattr__ would make every misspelt import from here read as Any
    __getattr__ = old_names(__name__, _RENAMED)
