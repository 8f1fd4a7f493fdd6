"""Fixtures for the provider and gateway tests: upstream MCP servers as real subprocesses.

- ``fixture_upstream``: ``upstream_server.py`` (SDK low-level server, stdio),
  the misbehaving-on-demand upstream, with its marker directory.
- ``npm_servers``: MCP servers nobody here wrote, from the npm registry
  (``@modelcontextprotocol/server-everything`` and ``server-filesystem``),
  run with the Node 22 the interop tests provision. They are installed into
  ``.interop/gateway-peers/`` by the interop machinery
  (``tests/interop/conftest.py``: one installer at a time, a ``.complete``
  marker per folder). Without npm the tests that need them skip; with
  ``OPENFUNCTIONS_REQUIRE_INTEROP=1`` (CI) a missing peer fails them instead.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from openfunctions.providers import UpstreamConfig, parse_upstreams

from ..interop.conftest import CACHE, LOCK_TIMEOUT_S, _DirLock, _npm_install, _unavailable, provision_node_peers

HERE = Path(__file__).resolve().parent
UPSTREAM_SCRIPT = HERE / "upstream_server.py"

EVERYTHING_SPEC = "@modelcontextprotocol/server-everything@2026.8.31"
FILESYSTEM_SPEC = "@modelcontextprotocol/server-filesystem@2026.8.31"


def upstream_entry(markers: Path, **extra: object) -> dict:
    """The ``mcpServers`` entry that starts the fixture upstream writing markers into ``markers``."""
    return {"command": sys.executable, "args": [str(UPSTREAM_SCRIPT), str(markers)], **extra}


def one_upstream(name: str, entry: dict) -> UpstreamConfig:
    return parse_upstreams({"mcpServers": {name: entry}})[0]


@dataclass(frozen=True)
class FixtureUpstream:
    markers: Path

    def config(self, name: str = "up", **extra: object) -> UpstreamConfig:
        return one_upstream(name, upstream_entry(self.markers, **extra))

    def entry(self, **extra: object) -> dict:
        return upstream_entry(self.markers, **extra)


@pytest.fixture
def fixture_upstream(tmp_path: Path) -> FixtureUpstream:
    return FixtureUpstream(tmp_path / "markers")


@dataclass(frozen=True)
class NpmServers:
    node: Path
    root: Path

    def _js(self, package: str) -> str:
        return str(self.root / "node_modules" / "@modelcontextprotocol" / package / "dist" / "index.js")

    def everything(self) -> dict:
        return {"command": str(self.node), "args": [self._js("server-everything"), "stdio"]}

    def filesystem(self, *roots: Path) -> dict:
        return {"command": str(self.node), "args": [self._js("server-filesystem"), *map(str, roots)]}


@pytest.fixture(scope="session")
def npm_servers() -> NpmServers:
    try:
        peers = provision_node_peers()
        with _DirLock(CACHE / ".lock", LOCK_TIMEOUT_S):
            _npm_install(shutil.which("npm"), CACHE / "gateway-peers", [EVERYTHING_SPEC, FILESYSTEM_SPEC], peers.env)
        return NpmServers(node=peers.node, root=CACHE / "gateway-peers")
    except (RuntimeError, TimeoutError, OSError) as e:
        _unavailable(str(e))
        raise  # unreachable: _unavailable skips or fails
