"""The gateway's upstream configuration: a JSON file in the shape MCP hosts use.

Claude Desktop (``claude_desktop_config.json``), Claude Code and Cursor keep
their servers under one ``mcpServers`` object; the gateway reads the same
shape, so a user can copy entries across (or point ``--upstreams`` at such a
file)::

    {"mcpServers": {
        "fs":     {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
                   "env": {"LOG": "1"}, "cwd": "/tmp"},
        "remote": {"url": "https://example.test/mcp", "headers": {"X-Team": "a"},
                   "bearerTokenEnv": "REMOTE_TOKEN"}
    }}

Per server, besides ``command``/``args``/``env``/``cwd`` (stdio) or
``url``/``headers`` (streamable HTTP):

- ``type``: ``"stdio"`` or ``"http"`` (``"streamable-http"``, ``"streamableHttp"``
  accepted); inferred from ``command``/``url`` when absent.
- ``bearerTokenEnv`` / ``bearerTokenFile``: send ``Authorization: Bearer <token>``,
  the token read from an environment variable or the first line of a file.
- ``timeout``: seconds one call may take (default 60); ``connectTimeout``:
  seconds to connect and list tools (default 30).
- ``trustAnnotations`` (default true): map ``readOnlyHint: true`` to a
  parallel-safe read; false treats every tool of that server as a write.
- ``scope``: what a call of this server's tools may run alongside (the
  scheduler's conflict scope, docs/GATEWAY.md "Concurrency"):
  ``"serial"`` (default: the server's calls one at a time, key
  ``mcp:<server>``; reads share it), ``"parallel"`` (no limit: the server
  copes with concurrent calls), ``{"keys": ["/repo"]}`` (calls whose
  arguments agree at those JSON Pointers run one at a time) or
  ``"exclusive"`` (each call runs alone in the whole registry).
- ``toolScopes``: ``{"<upstream tool name>": <scope>}``, overriding ``scope``
  per tool.
- ``requiredScopes``: scopes every tool of that server requires (a
  :class:`~openfunctions.core.ScopePolicy` then checks the caller's).
- ``maxResultBytes``: the largest upstream result passed on (default 4 MiB).
- ``maxTools``: the most tools mounted from this server (default 1000); the
  rest are left out, and ``health()`` / ``gateway check`` say how many.
- ``maxLineBytes``: the longest line a stdio server may write (default 32 MiB,
  or four times ``maxResultBytes`` if more); a longer one closes the connection.
- ``contextResources``: resource URIs whose text ``build_context()`` includes.
- ``disabled: true``: leave the server out.

``${VAR}`` in ``args``, ``env``, ``headers`` and ``url`` is replaced by the
environment variable (a missing one is an error naming it). Other keys hosts
write (``autoApprove``, ``description`` …) are ignored with a warning.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import structlog

from ._errors import UpstreamConfigError

log = structlog.get_logger("openfunctions.providers.config")

SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,48}$")
DEFAULT_CALL_TIMEOUT_S = 60.0
DEFAULT_CONNECT_TIMEOUT_S = 30.0
DEFAULT_MAX_RESULT_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_TOOLS = 1000
DEFAULT_MAX_LINE_BYTES = 32 * 1024 * 1024

_KNOWN = {
    "type", "command", "args", "env", "cwd", "url", "headers", "bearerTokenEnv", "bearerTokenFile",
    "timeout", "connectTimeout", "trustAnnotations", "requiredScopes", "maxResultBytes",
    "contextResources", "disabled", "maxTools", "maxLineBytes", "scope", "toolScopes",
}
_TYPES = {"stdio": "stdio", "http": "http", "streamable-http": "http", "streamableHttp": "http", "streamable_http": "http"}
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


#: A call scope: "serial", "parallel", "exclusive", or the JSON Pointers of a keyed scope.
Scope = str | tuple[str, ...]
SCOPES = ("serial", "parallel", "exclusive")


@dataclass(frozen=True)
class UpstreamConfig:
    """One upstream MCP server, as configured."""

    name: str
    transport: Literal["stdio", "http"]
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    bearer_token_env: str | None = None
    bearer_token_file: str | None = None
    timeout: float = DEFAULT_CALL_TIMEOUT_S
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S
    trust_annotations: bool = True
    required_scopes: tuple[str, ...] = ()
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    context_resources: tuple[str, ...] = ()
    max_tools: int = DEFAULT_MAX_TOOLS
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    scope: Scope = "serial"
    tool_scopes: dict[str, Scope] = field(default_factory=dict)

    def scope_of(self, tool: str) -> Scope:
        """The scope of upstream tool ``tool``: its ``toolScopes`` entry, else the server's ``scope``."""
        return self.tool_scopes.get(tool, self.scope)

    def describe(self) -> str:
        """Where it is, without secrets (no env values, headers or tokens)."""
        if self.transport == "stdio":
            return " ".join([self.command or "", *self.args]).strip()
        return self.url or ""

    def http_headers(self) -> dict[str, str]:
        """The headers to send, with the bearer token read now (so a rotated token is picked up on reconnect)."""
        headers = dict(self.headers)
        token = None
        if self.bearer_token_env:
            token = os.environ.get(self.bearer_token_env)
            if not token:
                raise UpstreamConfigError(
                    f"upstream {self.name!r}: environment variable {self.bearer_token_env} (bearerTokenEnv) is not set"
                )
        elif self.bearer_token_file:
            try:
                token = next(iter(Path(self.bearer_token_file).expanduser().read_text().splitlines()), "").strip()
            except (OSError, UnicodeDecodeError) as exc:
                raise UpstreamConfigError(
                    f"upstream {self.name!r}: cannot read a token from bearerTokenFile {self.bearer_token_file}: {exc}"
                ) from None
            if not token:
                raise UpstreamConfigError(f"upstream {self.name!r}: bearerTokenFile {self.bearer_token_file} is empty")
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers


def _expand(value: str, where: str) -> str:
    def sub(m: re.Match[str]) -> str:
        var = m.group(1)
        if var not in os.environ:
            raise UpstreamConfigError(f"{where}: environment variable {var} (written ${{{var}}}) is not set")
        return os.environ[var]

    return _VAR.sub(sub, value)


def _str(entry: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str | None:
    v = entry.get(key)
    if v is None:
        if required:
            raise UpstreamConfigError(f"{where}: '{key}' is required")
        return None
    if not isinstance(v, str) or not v:
        raise UpstreamConfigError(f"{where}: '{key}' must be a non-empty string, got {json.dumps(v)[:80]}")
    return v


def _str_map(entry: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    v = entry.get(key, {})
    if not isinstance(v, Mapping) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        raise UpstreamConfigError(f"{where}: '{key}' must be an object of strings")
    return {k: _expand(x, f"{where}.{key}.{k}") for k, x in v.items()}


def _str_list(entry: Mapping[str, Any], key: str, where: str, *, expand: bool = True) -> tuple[str, ...]:
    v = entry.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise UpstreamConfigError(f"{where}: '{key}' must be a list of strings")
    return tuple(_expand(x, f"{where}.{key}[{i}]") if expand else x for i, x in enumerate(v))


def _number(entry: Mapping[str, Any], key: str, where: str, default: float, *, integer: bool = False) -> Any:
    v = entry.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0 or (integer and not isinstance(v, int)):
        kind = "a positive whole number" if integer else "a positive number"
        raise UpstreamConfigError(f"{where}: '{key}' must be {kind}, got {json.dumps(v)[:80]}")
    return v


def _scope(value: Any, where: str) -> Scope:
    if isinstance(value, str) and value in SCOPES:
        return value
    if isinstance(value, Mapping) and set(value) == {"keys"}:
        keys = value["keys"]
        if isinstance(keys, list) and keys and all(isinstance(k, str) for k in keys):
            from openfunctions.core import Capability, OpenFunctionsError

            try:
                Capability(effect="external", conflict_keys=tuple(keys))
            except OpenFunctionsError as exc:
                raise UpstreamConfigError(f"{where}: {exc.message}") from None
            return tuple(keys)
    raise UpstreamConfigError(
        f"{where} must be \"serial\", \"parallel\", \"exclusive\" or {{\"keys\": [\"/json/pointer\", ...]}}, "
        f"got {json.dumps(value)[:80]}"
    )


def _scopes(entry: Mapping[str, Any], where: str) -> tuple[Scope, dict[str, Scope]]:
    scope = _scope(entry.get("scope", "serial"), f"{where}: 'scope'")
    tools = entry.get("toolScopes", {})
    if not isinstance(tools, Mapping):
        raise UpstreamConfigError(f"{where}: 'toolScopes' must be an object of tool name -> scope")
    return scope, {str(t): _scope(v, f"{where}: 'toolScopes.{t}'") for t, v in tools.items()}


def parse_upstream(name: str, entry: Any, *, source: str = "mcpServers") -> UpstreamConfig | None:
    """One ``mcpServers`` entry; ``None`` when it is ``disabled``."""
    where = f"{source}: server {name!r}"
    if not isinstance(name, str) or not SERVER_NAME_RE.match(name):
        raise UpstreamConfigError(
            f"{source}: server name {name!r} is invalid: it becomes part of tool names mcp__<server>__<tool>; "
            "use 1-48 characters of A-Z, a-z, 0-9, '_', '.', '-'"
        )
    if "__" in name:
        raise UpstreamConfigError(f"{where}: a server name may not contain '__' (it separates mcp__<server>__<tool>)")
    if not isinstance(entry, Mapping):
        raise UpstreamConfigError(f"{where}: the entry must be an object")
    if entry.get("disabled") is True:
        return None
    unknown = sorted(set(entry) - _KNOWN)
    if unknown:
        log.warning("upstream_config_keys_ignored", server=name, keys=unknown)
    kind = entry.get("type")
    if kind is not None and kind not in _TYPES:
        raise UpstreamConfigError(f"{where}: 'type' must be one of {', '.join(sorted(_TYPES))}, got {kind!r}")
    has_cmd, has_url = "command" in entry, "url" in entry
    if has_cmd == has_url:
        raise UpstreamConfigError(f"{where}: give either 'command' (stdio) or 'url' (streamable HTTP), not {'both' if has_cmd else 'neither'}")
    transport = "stdio" if has_cmd else "http"
    if kind is not None and _TYPES[kind] != transport:
        raise UpstreamConfigError(f"{where}: 'type' is {kind!r} but the entry has '{'command' if has_cmd else 'url'}'")
    trust = entry.get("trustAnnotations", True)
    if not isinstance(trust, bool):
        raise UpstreamConfigError(f"{where}: 'trustAnnotations' must be true or false")
    common: dict[str, Any] = dict(
        name=name,
        transport=transport,
        timeout=float(_number(entry, "timeout", where, DEFAULT_CALL_TIMEOUT_S)),
        connect_timeout=float(_number(entry, "connectTimeout", where, DEFAULT_CONNECT_TIMEOUT_S)),
        trust_annotations=trust,
        required_scopes=_str_list(entry, "requiredScopes", where, expand=False),
        max_result_bytes=_number(entry, "maxResultBytes", where, DEFAULT_MAX_RESULT_BYTES, integer=True),
        context_resources=_str_list(entry, "contextResources", where, expand=False),
        max_tools=_number(entry, "maxTools", where, DEFAULT_MAX_TOOLS, integer=True),
    )
    common["scope"], common["tool_scopes"] = _scopes(entry, where)
    common["max_line_bytes"] = _number(entry, "maxLineBytes", where,
                                       max(DEFAULT_MAX_LINE_BYTES, 4 * common["max_result_bytes"]), integer=True)
    if transport == "stdio":
        for key in ("url", "headers", "bearerTokenEnv", "bearerTokenFile"):
            if key in entry:
                raise UpstreamConfigError(f"{where}: '{key}' applies to a 'url' server, not a 'command' one")
        cwd = _str(entry, "cwd", where)
        return UpstreamConfig(
            command=_expand(_str(entry, "command", where, required=True) or "", f"{where}.command"),
            args=_str_list(entry, "args", where),
            env=_str_map(entry, "env", where),
            cwd=_expand(cwd, f"{where}.cwd") if cwd else None,
            **common,
        )
    for key in ("args", "env", "cwd"):
        if key in entry:
            raise UpstreamConfigError(f"{where}: '{key}' applies to a 'command' server, not a 'url' one")
    url = _expand(_str(entry, "url", where, required=True) or "", f"{where}.url")
    if not re.match(r"^https?://", url):
        raise UpstreamConfigError(f"{where}: 'url' must start with http:// or https://, got {url[:80]!r}")
    token_env, token_file = _str(entry, "bearerTokenEnv", where), _str(entry, "bearerTokenFile", where)
    if token_env and token_file:
        raise UpstreamConfigError(f"{where}: give 'bearerTokenEnv' or 'bearerTokenFile', not both")
    return UpstreamConfig(
        url=url, headers=_str_map(entry, "headers", where),
        bearer_token_env=token_env, bearer_token_file=token_file, **common,
    )


def parse_upstreams(document: Any, *, source: str = "mcpServers") -> list[UpstreamConfig]:
    """Every enabled upstream of a parsed config document (``{"mcpServers": {...}}``)."""
    if not isinstance(document, Mapping) or not isinstance(document.get("mcpServers"), Mapping):
        raise UpstreamConfigError(f"{source}: expected a JSON object with an 'mcpServers' object")
    out = []
    for name, entry in document["mcpServers"].items():
        cfg = parse_upstream(name, entry, source=source)
        if cfg is not None:
            out.append(cfg)
    return out


def load_upstreams(path: str | Path) -> list[UpstreamConfig]:
    """Read and check an ``mcpServers`` JSON file; errors name the file, the server and the key."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UpstreamConfigError(f"cannot read the upstreams file {p}: {exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UpstreamConfigError(f"{p} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    return parse_upstreams(document, source=str(p))


__all__ = ["SCOPES", "Scope", "UpstreamConfig", "load_upstreams", "parse_upstreams", "parse_upstream"]
