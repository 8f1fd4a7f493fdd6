"""openfunctions.adapters: the provider boundary (``AIAdapter``).

Adapters turn the registry's tools into a provider's tool format and
normalize its reply to one :class:`ChatReply`: text, or tool calls (id,
name, arguments), plus model, stop reason and usage.

- :class:`ScriptedAdapter`: replays replies (tests, demos, offline).
- :class:`SamplingAdapter`: the connected MCP host's model (``sampling/createMessage``).
- :class:`OpenAIAdapter` (Chat Completions), :class:`OpenAIResponsesAdapter`
  (Responses API), :class:`XAIAdapter`, :class:`OpenRouterAdapter`,
  :class:`DeepSeekAdapter`, :class:`KimiAdapter`, :class:`AnthropicAdapter`,
  :class:`GeminiAdapter`: HTTP (httpx; the ``adapters`` extra), retries on
  429/5xx honouring ``retry-after``; reasoning state (thinking blocks,
  thought signatures, reasoning items) kept on the messages and replayed.
- :func:`replay_history`: the pairing every adapter applies before it sends a
  history (a call without a result gets a :data:`NOT_RUN` result), so a
  conversation moves between providers and survives a restart mid-tool-turn.
- :func:`resolve_adapter`: provider and model from arguments, else the environment.

Usage::

    adapter = resolve_adapter(model="openai:gpt-4o-mini")      # key from OPENAI_API_KEY
    reply = await adapter.chat([Message.user("hi")], registry.list())
    if reply.tool_calls: ...
"""

from typing import TYPE_CHECKING, Any

from ._errors import (
    AdapterError,
    AdapterNotConfigured,
    AdapterTimeout,
    AuthenticationFailed,
    BadRequest,
    MalformedResponse,
    ModelProviderError,
    ModelProviderUnavailable,
    RateLimited,
    SamplingTimeout,
    SamplingUnavailable,
    ScriptExhausted,
)
from ._history import NOT_RUN, replay_history
from ._http import RetryPolicy
from ._resolve import PROVIDERS, resolve_adapter, resolve_model_provider
from ._sampling import (
    DEFAULT_SAMPLING_TIMEOUT_S,
    SAMPLER_KEY,
    SAMPLING_CAPABILITY_KEY,
    SAMPLING_TIMEOUT_KEY,
    Sampler,
    SamplingAdapter,
)
from ._scripted import ScriptedAdapter
from ._text import valid_json, valid_text
from ._types import (
    AIAdapter,
    ChatOptions,
    ChatReply,
    Message,
    ProviderPart,
    Role,
    StopReason,
    StreamEvent,
    ToolCall,
    Usage,
)

if TYPE_CHECKING:  # the lazy names, typed; at run time the __getattr__ below loads them
    from ._anthropic import AnthropicAdapter
    from ._gemini import GeminiAdapter
    from ._openai import DeepSeekAdapter, KimiAdapter, OpenAIAdapter, OpenRouterAdapter, XAIAdapter
    from ._openai_responses import OpenAIResponsesAdapter
else:  # not seen by mypy: a module __getattr__ would make every misspelt import from here read as Any
    def __getattr__(name: str) -> Any:  # the HTTP adapters load on first use (httpx is an optional extra)
        if name in ("OpenAIAdapter", "XAIAdapter", "OpenRouterAdapter", "DeepSeekAdapter", "KimiAdapter"):
            from . import _openai

            return getattr(_openai, name)
        if name == "OpenAIResponsesAdapter":
            from ._openai_responses import OpenAIResponsesAdapter

            return OpenAIResponsesAdapter
        if name == "AnthropicAdapter":
            from ._anthropic import AnthropicAdapter

            return AnthropicAdapter
        if name == "GeminiAdapter":
            from ._gemini import GeminiAdapter

            return GeminiAdapter
        raise AttributeError(f"module 'openfunctions.adapters' has no attribute {name!r}")


__all__ = [
    "AIAdapter", "AdapterError", "AdapterNotConfigured", "AdapterTimeout", "AnthropicAdapter", "AuthenticationFailed",
    "BadRequest", "ChatOptions", "ChatReply", "DeepSeekAdapter", "GeminiAdapter", "KimiAdapter", "MalformedResponse",
    "Message", "ModelProviderError", "ModelProviderUnavailable", "OpenAIAdapter", "OpenAIResponsesAdapter",
    "OpenRouterAdapter", "PROVIDERS", "ProviderPart", "RateLimited", "RetryPolicy", "Role",
    "DEFAULT_SAMPLING_TIMEOUT_S", "SAMPLER_KEY", "SAMPLING_CAPABILITY_KEY", "SAMPLING_TIMEOUT_KEY", "Sampler",
    "SamplingAdapter", "SamplingTimeout", "SamplingUnavailable", "ScriptExhausted",
    "ScriptedAdapter", "StopReason", "StreamEvent", "ToolCall", "Usage", "XAIAdapter", "resolve_adapter",
    "NOT_RUN", "replay_history", "resolve_model_provider", "valid_json", "valid_text",
]
