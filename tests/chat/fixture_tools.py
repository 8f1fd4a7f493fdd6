"""Tools and context providers the chat tests offer (importable as --module / --provider-module)."""

from __future__ import annotations

from typing import Any

import anyio

from openfunctions.core import Capability, ToolRegistry, define_tool
from openfunctions.providers import ProviderHealth, define_provider

NUMBERS = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"],
           "additionalProperties": False}


async def _add(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"sum": p["a"] + p["b"]}


add = define_tool(name="add", description="Add two numbers.", input_schema=NUMBERS, handler=_add,
                  capability=Capability(effect="read", parallel_safe=True, idempotent=True), tags=("math",))


async def _shout(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"text": p["text"].upper()}


shout = define_tool(name="shout", description="Upper-case a text.",
                    input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
                    handler=_shout, tags=("text",))

registry = ToolRegistry([add, shout])


class _Connected:
    def __init__(self, provider: Any, *, context: Any = None, fail_context: bool = False, fail_health: bool = False) -> None:
        self.provider = provider
        self._context, self._fail_context, self._fail_health = context, fail_context, fail_health

    def create_tools(self) -> list[Any]:
        async def lookup(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
            return {"owner": "Grace", "project": p["project"]}

        return [define_tool(name=f"{self.provider.id}_owner", description="Who owns a project.",
                            input_schema={"type": "object", "properties": {"project": {"type": "string"}},
                                          "required": ["project"]}, handler=lookup)]

    async def build_context(self) -> str:
        if self._fail_context:
            raise RuntimeError("the projects database is down")
        return self._context or ""

    async def health(self) -> ProviderHealth:
        if self._fail_health:
            return ProviderHealth(self.provider.id, "down", "the projects database is down")
        return ProviderHealth(self.provider.id, "up", tools=1)

    async def close(self) -> None:
        pass


def _provider(pid: str, **kw: Any) -> Any:
    async def connect(provider: Any) -> _Connected:
        return _Connected(provider, **kw)

    return define_provider(id=pid, name=pid.title(), domains=("projects",), connect=connect)


projects = _provider("projects", context="Active project: Apollo (owner Grace).")
flaky = _provider("flaky", fail_context=True, fail_health=True)


async def _refuse(provider: Any) -> Any:
    raise ConnectionRefusedError("connection refused by 127.0.0.1:9")


unreachable = define_provider(id="unreachable", name="Unreachable", connect=_refuse)


def blocking_reply(thinking: anyio.Event, cancelled: anyio.Event) -> Any:
    """A scripted reply that thinks forever: sets ``thinking`` when asked, ``cancelled`` when its turn is cancelled."""

    async def reply(messages: Any, tools: Any) -> str:
        thinking.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()
        return "never"

    return reply
