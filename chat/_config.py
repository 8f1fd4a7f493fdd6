"""``ChatConfig``: everything :func:`open_chat_agent` resolves, in one validated model.

Given as a dict, a :class:`ChatConfig`, another pydantic model (its
``model_dump()``), or keyword arguments; an unknown key is an error naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from openfunctions.core import ToolDefinition, ToolRegistry, import_spec

from ._conversations import MAX_CONVERSATIONS
from ._errors import ChatConfigError

#: The longest chat message accepted, in characters (``chat()``, ``POST /chat``: 413 beyond it).
MAX_MESSAGE_CHARS = 8000


class ChatConfig(BaseModel):
    """The chat agent's configuration (see docs/CHAT.md for every field)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, frozen=True)

    name: str = Field("chat", description="the agent's name in run records (agent_<name>)")
    # model
    provider: str | None = Field(None, description="anthropic, openai, gemini, xai, openrouter; None: from the environment")
    model: str | None = Field(None, description="model name, or 'provider:model'; None: the provider's default")
    adapter: Any = Field(None, description="an AIAdapter instance (e.g. ScriptedAdapter); overrides provider/model")
    api_key: str | None = Field(None, repr=False)
    base_url: str | None = None
    # prompt
    prompt: Any = Field(None, description="preset name, inline text, a .md file path, or structured options")
    # tools
    registry: ToolRegistry | None = Field(None, description="the tools to offer (its executor runs them)")
    module: str | None = Field(None, description="'pkg.module:attr' holding a ToolRegistry or a list of tools")
    tools: list[str | ToolDefinition] | None = Field(None, description="tool names (or definitions) to offer; None: all")
    tags: list[str] | None = Field(None, description="offer only the registry's tools carrying one of these tags")
    exclude: list[str] = Field(default_factory=list, description="tool names never offered")
    # memory
    memory: Any = Field(True, description="True: conversation + facts in the data dir; False: off; or a Memory")
    thread_id: str | None = Field(None, description="conversation thread to continue; None: a new one")
    max_conversations: int = Field(MAX_CONVERSATIONS, ge=1, le=100_000,
                                   description="issued conversations kept (serve(): one per client); least recently used evicted")
    history_messages: int = Field(20, ge=0, le=100, description="earlier messages shown to the model each turn")
    context_ceiling: int | None = Field(None, ge=1, description="tokens: over this the older turns are compacted "
                                        "into a model-written summary kept in the conversation; None: never")
    recall_facts: int = Field(5, ge=0, le=20, description="saved facts matching the message put in the prompt")
    # context providers
    providers: list[Any] = Field(default_factory=list, description="ContextProvider instances or 'pkg.module:attr' names")
    # runs
    data_dir: str | Path | None = Field(None, description="run records, receipts and memory; None: the per-user data dir")
    journal: bool = Field(True, description="journal tool receipts in <data-dir>/journal/chat.journal (own registry only)")
    max_rounds: int = Field(8, ge=1, le=100)
    max_tool_calls: int = Field(32, ge=0, le=1000)
    max_tokens: int = Field(1024, ge=1)
    temperature: float | None = None
    timeout_s: float | None = Field(None, gt=0)
    max_message_chars: int = Field(MAX_MESSAGE_CHARS, ge=1, le=MAX_MESSAGE_CHARS)


def load_config(config: Any = None, **kwargs: Any) -> ChatConfig:
    """A :class:`ChatConfig` from a dict, a model, or keyword arguments (merged, keywords win)."""
    if isinstance(config, ChatConfig):
        if not kwargs:
            return config
        config = {k: getattr(config, k) for k in ChatConfig.model_fields if k in config.model_fields_set}
    elif isinstance(config, BaseModel):
        config = config.model_dump()
    elif config is None:
        config = {}
    elif not isinstance(config, Mapping):
        raise ChatConfigError(f"config must be a dict, a ChatConfig or a pydantic model, got {type(config).__name__}")
    try:
        return ChatConfig(**{**dict(config), **kwargs})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'config'}: "
            + ("unknown key" if e["type"] == "extra_forbidden" else e["msg"])
            for e in exc.errors()
        )
        raise ChatConfigError(f"chat config is invalid: {problems}",
                              details={"errors": [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()]}) from None


def load_object(spec: str, what: str, default_attr: str) -> Any:
    """``pkg.module:attr`` (``attr`` defaults to ``default_attr``); a zero-argument factory is called."""
    obj = import_spec(spec, default_attr=default_attr, what=what, error=ChatConfigError)
    if callable(obj) and not isinstance(obj, (ToolRegistry, ToolDefinition, type)) and not hasattr(obj, "connect") \
            and not hasattr(obj, "__iter__"):
        try:
            obj = obj()
        except TypeError as exc:
            raise ChatConfigError(f"{what} {spec!r}: the factory must take no arguments ({exc})") from None
    return obj


def module_tools(spec: str) -> list[ToolDefinition]:
    """The tools of ``--module pkg.module:attr`` (attr defaults to ``registry``)."""
    obj = load_object(spec, "module", "registry")
    if isinstance(obj, ToolRegistry):
        return obj.list()
    if isinstance(obj, ToolDefinition):
        return [obj]
    if isinstance(obj, (list, tuple)):
        bad = sorted({type(t).__name__ for t in obj if not isinstance(t, ToolDefinition)})
        if bad:
            raise ChatConfigError(f"module {spec!r}: expected ToolDefinition items, found {', '.join(bad)}")
        return list(obj)
    raise ChatConfigError(f"module {spec!r}: expected a ToolRegistry, a list of tools, or a zero-argument factory "
                          f"returning one; got {type(obj).__name__}")


__all__ = ["ChatConfig", "MAX_MESSAGE_CHARS", "load_config", "load_object", "module_tools"]
