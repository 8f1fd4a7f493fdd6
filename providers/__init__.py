"""openfunctions.providers: context providers, and the MCP gateway built on them.

- :class:`ContextProvider` (id, name, capability domains; ``connect()``) ->
  a connected provider (``create_tools()``, ``build_context()``, ``health()``,
  ``close()``); :func:`connect_provider` registers its tools tagged
  ``context`` and ``context:<id>``; :func:`context_prompt`,
  :func:`compose_prompt`, :func:`auto_tool_guide`, :func:`check_provider_health`.
- :class:`McpProvider`: another MCP server (stdio or streamable HTTP) whose
  tools are mounted as ``mcp__<server>__<tool>`` and run through our executor
  (its prompts as ``mcp__<server>__<prompt>``);
  :class:`Gateway` / :func:`build_gateway_profile`: several of them, from an
  ``mcpServers`` JSON file (``serve --profile gateway --upstreams FILE``).
"""

from ._config import UpstreamConfig, load_upstreams, parse_upstreams
from ._errors import ProviderError, ProviderUnavailable, UpstreamConfigError, UpstreamError, UpstreamUnavailable
from ._gateway import Gateway, build_gateway_profile
from ._mcp import UPSTREAM_META_KEY, ConnectedMcpProvider, McpProvider, mounted_name
from ._provider import (
    CONTEXT_TAG,
    DOMAINS,
    ConnectedProvider,
    ContextProvider,
    ProviderHealth,
    auto_tool_guide,
    check_provider_health,
    compose_prompt,
    connect_provider,
    context_prompt,
    define_provider,
    provider_tags,
)

__all__ = [
    "CONTEXT_TAG", "DOMAINS", "UPSTREAM_META_KEY", "ConnectedMcpProvider", "ConnectedProvider", "ContextProvider",
    "Gateway", "McpProvider", "ProviderError", "ProviderHealth", "ProviderUnavailable", "UpstreamConfig",
    "UpstreamConfigError", "UpstreamError", "UpstreamUnavailable", "auto_tool_guide", "build_gateway_profile",
    "check_provider_health", "compose_prompt", "connect_provider", "context_prompt", "define_provider",
    "load_upstreams", "mounted_name", "parse_upstreams", "provider_tags",
]
