"""The gateway: several upstream MCP servers mounted into one registry, served as one MCP server.

``openfunctions-mcp serve --profile gateway --upstreams servers.json`` builds
it through :func:`build_gateway_profile` (the contract is the comment above
``LAYERS`` in ``servers/_profiles.py``). The server runs :meth:`Gateway.start`
before it serves: every upstream is connected then, and one that is down is
logged and retried in the background, never fatal.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

import anyio
import mcp_types as types
import structlog
from mcp.shared.exceptions import MCPError

from openfunctions.core import ToolDefinition, ToolRegistry, import_spec

from ._config import UpstreamConfig, load_upstreams
from ._errors import ProviderError, ProviderUnavailable, UpstreamConfigError
from ._mcp import ConnectedMcpProvider, McpProvider
from ._provider import DEFAULT_CONTEXT_TIMEOUT_S, ProviderHealth, check_provider_health, context_prompt

log = structlog.get_logger("openfunctions.providers.gateway")

HEALTH_URI = "openfunctions://gateway/upstreams"
CONTEXT_URI = "openfunctions://gateway/context"

INSTRUCTIONS = (
    "Tools of other MCP servers are mounted here as mcp__<server>__<tool>. Each call is validated against the "
    "upstream's schema, checked by this server's policy, journaled and then forwarded; the result is the "
    "upstream's own, with this server's receipt in _meta (dev.openfunctions/receipt). A receipt with certainty "
    "'unknown' means the upstream may have acted (it died, timed out or the call was cancelled mid-way)."
)


class Gateway:
    """Upstream MCP servers mounted into ``registry``. ``start()``/``aclose()`` in the same task."""

    def __init__(self, upstreams: Iterable[UpstreamConfig], registry: ToolRegistry, *, errlog: TextIO | None = None) -> None:
        self.registry = registry
        self.providers = [McpProvider(c, errlog=errlog) for c in upstreams]
        self.connected: list[ConnectedMcpProvider] = []
        self._listeners: list[Callable[[], Awaitable[None]]] = []
        self._server: Any = None
        self._served_prompts: set[str] = set()

    @property
    def instructions(self) -> str:
        names = ", ".join(p.id for p in self.providers) or "none configured"
        return f"{INSTRUCTIONS} Upstream servers: {names}."

    async def start(self) -> None:
        """Connect every upstream (concurrently) and mount its tools; report the ones that are down."""
        for p in self.providers:
            c = await p.connect(wait=False)
            c.share_names_with(self.connected)  # mounted names are unique across the servers (see _mcp.py)
            c.on_tools_changed(self._tools_changed)
            c.on_prompts_changed(self._prompts_changed)
            await c.mount(self.registry)
            self.connected.append(c)
        async with anyio.create_task_group() as tg:
            for c in self.connected:
                tg.start_soon(c.wait_first_attempt)
        for h in await self.health():
            if h.ok:
                log.info("upstream_mounted", server=h.provider_id, tools=h.tools)
            else:
                log.warning("upstream_down_at_start", server=h.provider_id, error=h.message,
                            hint="retrying in the background; its tools appear when it answers")

    def install(self, server: Any) -> None:
        """Called by the MCP server that serves the registry: tell its clients when our tool set changes,
        serve the upstreams' prompts as ``mcp__<server>__<prompt>`` (kept in step with them), and serve two
        resources: each upstream's health (JSON) and the upstreams' context block (markdown)."""
        notify = getattr(server, "notify_tools_changed", None)
        if notify is not None:
            self._listeners.append(notify)
        if hasattr(server, "add_prompt") and hasattr(server, "remove_prompt"):
            self._server = server
            self._sync_prompts()
        add_resource = getattr(server, "add_resource", None)
        if add_resource is not None:
            add_resource(HEALTH_URI, "gateway-upstreams", "application/json", self._health_json,
                         title="Gateway upstreams", description="Each upstream MCP server's status, tool count and last error.")
            add_resource(CONTEXT_URI, "gateway-context", "text/markdown", self.context,
                         title="Gateway context", description="What the upstream servers offer (their instructions and resources).")

    async def _health_json(self) -> str:
        return json.dumps({"upstreams": [h.to_dict() for h in await self.health()]}, indent=2)

    def on_tools_changed(self, callback: Callable[[], Awaitable[None]]) -> None:
        self._listeners.append(callback)

    async def _tools_changed(self) -> None:
        for cb in list(self._listeners):
            try:
                await cb()
            except Exception as exc:
                log.warning("tools_changed_notify_failed", error=str(exc))

    def _sync_prompts(self) -> bool:
        """Bring the server's mounted prompts in step with the upstreams'; True if anything changed."""
        server = self._server
        if server is None:
            return False
        wanted: dict[str, tuple[ConnectedMcpProvider, dict[str, Any]]] = {}
        clashes: set[str] = set()
        for c in self.connected:
            for p in c.prompts():
                if p["name"] in wanted:
                    clashes.add(p["name"])
                wanted.setdefault(p["name"], (c, p))
        for name in clashes:  # two servers' prompts map to one name: neither is served, whatever the order
            log.warning("upstream_prompt_problem", prompt=name, problem="left out: two servers' prompts map to this name")
            del wanted[name]
        changed = False
        for name in self._served_prompts - set(wanted):
            server.remove_prompt(name)
            changed = True
        for name, (c, p) in wanted.items():
            server.add_prompt(name, p["description"], p["arguments"], self._prompt_renderer(c, name), title=p["title"])
            changed = changed or name not in self._served_prompts
        self._served_prompts = set(wanted)
        return changed

    @staticmethod
    def _prompt_renderer(connected: ConnectedMcpProvider, name: str) -> Callable[[dict[str, str]], Awaitable[dict[str, Any]]]:
        async def render(arguments: dict[str, str]) -> dict[str, Any]:
            try:
                result = await connected.get_prompt(name, arguments)
            except ProviderError as exc:
                upstream_code = exc.details.get("upstream_code")
                code = types.INVALID_PARAMS if upstream_code == types.INVALID_PARAMS else types.INTERNAL_ERROR
                raise MCPError(code, exc.message, data={"code": exc.code, **exc.details}) from None
            return {**result, "resultType": "complete"}

        return render

    async def _prompts_changed(self) -> None:
        if self._sync_prompts():
            notify = getattr(self._server, "notify_prompts_changed", None)
            if notify is not None:
                try:
                    await notify()
                except Exception as exc:
                    log.warning("prompts_changed_notify_failed", error=str(exc))

    async def health(self) -> list[ProviderHealth]:
        return await check_provider_health(self.connected)

    async def context(self, *, timeout: float = DEFAULT_CONTEXT_TIMEOUT_S) -> str:
        return await context_prompt(self.connected, timeout=timeout)

    async def aclose(self) -> None:
        # Each upstream's supervisor lives in a task group entered by start():
        # leave them in reverse order (anyio's scopes nest).
        while self.connected:
            c = self.connected.pop()
            try:
                await c.close()
            except Exception as exc:
                log.warning("upstream_close_failed", server=c.config.name, error=str(exc))


def _module_parts(modules: Iterable[str]) -> list[ToolRegistry | list[ToolDefinition]]:
    parts: list[ToolRegistry | list[ToolDefinition]] = []
    for spec in modules:
        obj = import_spec(spec, default_attr="registry", error=UpstreamConfigError)
        if callable(obj) and not isinstance(obj, (ToolRegistry, ToolDefinition)):
            obj = obj()
        if isinstance(obj, ToolDefinition):
            obj = [obj]
        if not isinstance(obj, ToolRegistry):
            obj = list(obj)
            if not all(isinstance(t, ToolDefinition) for t in obj):
                raise UpstreamConfigError(f"--module {spec!r}: expected a ToolRegistry or ToolDefinitions")
        parts.append(obj)
    return parts


def _base_registry(registry: ToolRegistry | None, modules: Iterable[str]) -> ToolRegistry:
    """A registry to mount into that shares the executor (policy, scheduler, journal) of the one given.

    Under ``all`` the registry given may be a read-only projection, so the
    gateway never registers into it: it returns a new registry over the same
    tools and the same executor. Standalone, a ``--module`` ToolRegistry lends
    its executor (and with it its policy: a governed gateway) and its tools.
    """
    if registry is not None:
        base = ToolRegistry(executor=registry.executor)
        for t in registry.list():
            base.register(t, source=registry.source_of(t.name))
        return base
    modules = tuple(modules)
    parts = _module_parts(modules)
    owner = next((p for p in parts if isinstance(p, ToolRegistry)), None)
    base = ToolRegistry(executor=owner.executor) if owner is not None else ToolRegistry()
    for spec, p in zip(modules, parts, strict=False):
        for t in p.list() if isinstance(p, ToolRegistry) else p:
            base.register(t, source=f"--module {spec}")
    return base


def build_gateway_profile(
    *,
    data_dir: Path | None = None,
    registry: ToolRegistry | None = None,
    principal: str | None = None,
    modules: Iterable[str] = (),
    store: str | None = None,
    upstreams: str | Path | None = None,
    **_: Any,
) -> Gateway:
    """The ``gateway`` profile's builder (see ``servers/_profiles.py``); the server calls ``start()`` before serving."""
    if upstreams is None:
        raise ProviderUnavailable(
            "the 'gateway' profile needs --upstreams FILE: a JSON file with an 'mcpServers' object naming the "
            "upstream MCP servers (the shape of Claude Desktop's config; see docs/GATEWAY.md)"
        )
    configs = load_upstreams(upstreams)
    if not configs:
        log.warning("gateway_no_upstreams", file=str(upstreams))
    return Gateway(configs, _base_registry(registry, () if registry is not None else modules))


__all__ = ["CONTEXT_URI", "Gateway", "HEALTH_URI", "INSTRUCTIONS", "build_gateway_profile"]
