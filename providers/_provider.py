"""Context providers: an external system brought into the runtime as tools and prompt context.

Two phases, as in the reference architecture::

    ContextProvider --connect()--> ConnectedProvider --create_tools()--> registry
                                                     --build_context()--> system prompt

A :class:`ContextProvider` is cheap metadata (id, name, capability domains)
plus ``connect()``; nothing is opened until ``connect()`` runs.
:func:`connect_provider` connects one and registers its tools, tagged
``context`` and ``context:<id>``. The tools then run like any other: through
the registry's executor (validation, policy, scheduling, journal, receipts).

Context is best-effort: :func:`context_prompt` asks every connected provider
for its ``build_context()`` block concurrently, each under a time limit; a
provider that raises or hangs is logged and left out, the others still count.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import anyio
import structlog

from openfunctions.core import OpenFunctionsError, ToolDefinition, ToolRegistry

from ._errors import ProviderError

log = structlog.get_logger("openfunctions.providers")

DOMAINS: tuple[str, ...] = (
    "tasks", "projects", "calendar", "knowledge", "people",
    "organizations", "codebase", "vault", "datasets", "documents",
)
"""The capability domains a provider may declare (the reference architecture's list)."""

CONTEXT_TAG = "context"
PROVIDER_ID_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")

DEFAULT_CONTEXT_TIMEOUT_S = 5.0
DEFAULT_HEALTH_TIMEOUT_S = 10.0

Status = Literal["up", "degraded", "down"]


def provider_tags(provider_id: str) -> tuple[str, str]:
    """The tags every tool of provider ``provider_id`` carries."""
    return (CONTEXT_TAG, f"{CONTEXT_TAG}:{provider_id}")


@dataclass(frozen=True)
class ProviderHealth:
    """One provider's health: ``ok`` is ``status == "up"``; ``message`` says what is wrong."""

    provider_id: str
    status: Status
    message: str | None = None
    tools: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "up"

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider_id, "status": self.status, "ok": self.ok,
            "message": self.message, "tools": self.tools, "details": self.details,
        }


@runtime_checkable
class ConnectedProvider(Protocol):
    """A provider after ``connect()``. ``build_context()`` is optional (see :func:`context_prompt`).

    A connected provider whose tool set changes while it runs (an MCP upstream
    that announces ``tools/list_changed``) also has ``async mount(registry)``;
    :func:`connect_provider` then lets it register and keep its tools in step.
    """

    @property
    def provider(self) -> ContextProvider: ...  # read-only here, so a subclass of ContextProvider fits

    def create_tools(self) -> list[ToolDefinition]: ...

    async def health(self) -> ProviderHealth: ...

    async def close(self) -> None: ...


class ContextProvider:
    """Define phase: cheap metadata and :meth:`connect`. Subclass it, or use :func:`define_provider`.

    ``domains`` declares what the provider offers without loading its tools
    (for setup UX and tool selection); each is one of :data:`DOMAINS`.
    """

    def __init__(self, *, id: str, name: str, domains: Iterable[str] = (), description: str | None = None) -> None:
        if not isinstance(id, str) or not PROVIDER_ID_RE.match(id):
            raise ProviderError(f"provider id {id!r} is invalid: use 1-64 characters of A-Z, a-z, 0-9, '_', '.', '-'")
        domains = tuple(domains)
        unknown = [d for d in domains if d not in DOMAINS]
        if unknown:
            raise ProviderError(
                f"provider {id!r} declares unknown capability domain(s) {unknown}: choose from {', '.join(DOMAINS)}"
            )
        self.id = id
        self.name = name
        self.domains = domains
        self.description = description

    async def connect(self) -> ConnectedProvider:
        raise NotImplementedError(f"provider {self.id!r} does not implement connect()")

    def metadata(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "domains": list(self.domains), "description": self.description}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.id!r} domains={list(self.domains)}>"


class _DefinedProvider(ContextProvider):
    def __init__(self, connect: Callable[[ContextProvider], Awaitable[ConnectedProvider]], **meta: Any) -> None:
        super().__init__(**meta)
        self._connect = connect

    async def connect(self) -> ConnectedProvider:
        return await self._connect(self)


def define_provider(
    *,
    id: str,
    name: str,
    connect: Callable[[ContextProvider], Awaitable[ConnectedProvider]],
    domains: Iterable[str] = (),
    description: str | None = None,
) -> ContextProvider:
    """A provider from metadata and an ``async connect(provider) -> ConnectedProvider`` function."""
    return _DefinedProvider(connect, id=id, name=name, domains=domains, description=description)


def tag_tool(tool: ToolDefinition, provider_id: str) -> ToolDefinition:
    """``tool`` with the provider's tags added (a new definition: tags are part of the spec)."""
    missing = tuple(t for t in provider_tags(provider_id) if t not in tool.tags)
    if not missing:
        return tool
    return dataclasses.replace(tool, tags=tool.tags + missing)


def _provider_id(connected: Any) -> str:
    provider = getattr(connected, "provider", None)
    return getattr(provider, "id", None) or type(connected).__name__


async def connect_provider(provider: ContextProvider, registry: ToolRegistry) -> ConnectedProvider:
    """Connect ``provider`` and register its tools in ``registry``, tagged ``context`` and ``context:<id>``.

    If registering fails (a name collision), the tools registered so far are
    removed, the connection is closed, and the error is raised.
    """
    connected = await provider.connect()
    try:
        mount = getattr(connected, "mount", None)
        if mount is not None:
            await mount(registry)
            return connected
        added: list[str] = []
        try:
            for t in connected.create_tools():
                registry.register(tag_tool(t, provider.id))
                added.append(t.name)
        except BaseException:
            for name in added:
                registry.unregister(name)
            raise
    except BaseException:
        with anyio.CancelScope(shield=True):
            await connected.close()
        raise
    log.info("provider_connected", provider=provider.id, tools=len(added))
    return connected


async def _context_block(connected: Any, timeout: float) -> str | None:
    build = getattr(connected, "build_context", None)
    if build is None:
        return None
    pid = _provider_id(connected)
    try:
        with anyio.fail_after(timeout):
            block = await build()
    except TimeoutError:
        log.warning("provider_context_skipped", provider=pid, reason=f"build_context() took over {timeout:g} s")
        return None
    except Exception as exc:
        log.warning("provider_context_skipped", provider=pid, reason=f"build_context() raised {type(exc).__name__}: {exc}")
        return None
    if block is not None and not isinstance(block, str):
        log.warning("provider_context_skipped", provider=pid, reason=f"build_context() returned {type(block).__name__}, not str")
        return None
    return block.strip() or None if block else None


async def context_prompt(
    providers: Sequence[ConnectedProvider], *, timeout: float = DEFAULT_CONTEXT_TIMEOUT_S
) -> str:
    """The providers' ``build_context()`` blocks, in the given order, joined by blank lines.

    Best-effort: all run concurrently, each limited to ``timeout`` seconds; a
    provider that raises, hangs or returns a non-string is logged and left out.
    """
    blocks: list[str | None] = [None] * len(providers)

    async def one(i: int, p: Any) -> None:
        blocks[i] = await _context_block(p, timeout)

    async with anyio.create_task_group() as tg:
        for i, p in enumerate(providers):
            tg.start_soon(one, i, p)
    return "\n\n".join(b for b in blocks if b)


def compose_prompt(*, role: str, context: str | None = None, tool_guide: str | None = None) -> str:
    """A system prompt: the role, then a ``## Context`` and a ``## Tools`` section when given."""
    parts = [role.strip()]
    if context and context.strip():
        parts.append("## Context\n\n" + context.strip())
    if tool_guide and tool_guide.strip():
        parts.append("## Tools\n\n" + tool_guide.strip())
    return "\n\n".join(parts)


def _summary(description: str, limit: int) -> str:
    first = description.strip().split("\n\n", 1)[0].replace("\n", " ").strip()
    return first if len(first) <= limit else first[: limit - 1].rstrip() + "…"


def auto_tool_guide(registry: ToolRegistry, *, max_description: int = 160) -> str:
    """A short guide to ``registry``'s tools for a system prompt, grouped by provider.

    Tools tagged ``context:<id>`` are listed under that provider; the rest
    under "Other tools". Each line: name, a one-line summary, and "read-only"
    when the tool's reviewed capability says it only reads.
    """
    groups: dict[str, list[str]] = {}
    for t in sorted(registry.list(), key=lambda t: t.name):
        group = next((tag.split(":", 1)[1] for tag in t.tags if tag.startswith(CONTEXT_TAG + ":")), "")
        note = " (read-only)" if t.capability is not None and t.capability.effect == "read" else ""
        summary = _summary(t.description, max_description)
        groups.setdefault(group, []).append(f"- {t.name}{note}" + (f": {summary}" if summary else ""))
    out = []
    for group in sorted(groups, key=lambda g: (g == "", g)):
        out.append(f"### {group or 'Other tools'}\n" + "\n".join(groups[group]))
    return "\n\n".join(out)


async def check_provider_health(
    providers: Sequence[ConnectedProvider], *, timeout: float = DEFAULT_HEALTH_TIMEOUT_S
) -> list[ProviderHealth]:
    """Every provider's :class:`ProviderHealth`, checked concurrently.

    A ``health()`` that raises or takes over ``timeout`` seconds counts as ``down``.
    """
    out: list[ProviderHealth | None] = [None] * len(providers)

    async def one(i: int, p: Any) -> None:
        pid = _provider_id(p)
        try:
            with anyio.fail_after(timeout):
                out[i] = await p.health()
        except TimeoutError:
            out[i] = ProviderHealth(pid, "down", f"health() took over {timeout:g} s")
        except Exception as exc:
            msg = exc.message if isinstance(exc, OpenFunctionsError) else f"{type(exc).__name__}: {exc}"
            out[i] = ProviderHealth(pid, "down", f"health() raised: {msg}")

    async with anyio.create_task_group() as tg:
        for i, p in enumerate(providers):
            tg.start_soon(one, i, p)
    return [h for h in out if h is not None]


__all__ = [
    "CONTEXT_TAG", "DOMAINS", "ConnectedProvider", "ContextProvider", "ProviderHealth",
    "auto_tool_guide", "check_provider_health", "compose_prompt", "connect_provider", "context_prompt",
    "define_provider", "provider_tags", "tag_tool",
]
