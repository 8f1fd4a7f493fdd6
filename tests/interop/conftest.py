"""Provision the Node peers the interop tests drive, once, into ``.interop/``.

The peers are clients nobody here wrote: the MCP conformance suite and the
MCP Inspector CLI. Both need Node >= 22; many machines (this project's
included) have an older system Node, so a private Node 22 comes from the npm
registry as the ``node-<os>-<arch>`` package. Everything lands in the
repository's gitignored ``.interop/`` directory:

    .interop/
      .lock                 flock: one installer at a time across sessions
      node/                 npm folder holding node-<os>-<arch>@22
      peers/                npm folder holding the pinned peers
      home/                 scratch HOME for the peers (Inspector writes ~/.mcp-inspector)
      npm-cache/            npm's cache (keeps a user's ~/.npm out of it)

A folder is complete only when its ``.complete`` marker holds the exact
package spec it was installed for; anything else (an interrupted install, a
changed pin) is wiped and installed again. The second run finds the markers
and costs nothing.

Without ``npm`` the interop tests skip with the reason; with
``OPENFUNCTIONS_REQUIRE_INTEROP=1`` (CI sets it) a missing or failing
install is a test failure instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".interop"

NODE_MAJOR = 22
CONFORMANCE_SPEC = "@modelcontextprotocol/conformance@0.2.0-alpha.12"
INSPECTOR_SPEC = "@modelcontextprotocol/inspector@2.12.0"

INSTALL_TIMEOUT_S = 600
LOCK_TIMEOUT_S = 900


def _interop_required() -> bool:
    return os.environ.get("OPENFUNCTIONS_REQUIRE_INTEROP", "").strip() not in ("", "0", "false", "no")


def _unavailable(reason: str) -> None:
    if _interop_required():
        pytest.fail(f"interop peers unavailable and OPENFUNCTIONS_REQUIRE_INTEROP is set: {reason}", pytrace=False)
    pytest.skip(f"interop peers unavailable: {reason}")


@dataclass(frozen=True)
class NodePeers:
    """Where the provisioned peers are and how to run them."""

    node: Path
    peers_dir: Path
    home: Path
    env: dict[str, str] = field(repr=False)

    def bin_js(self, package: str, name: str) -> Path:
        pkg_dir = self.peers_dir / "node_modules" / package
        bins = json.loads((pkg_dir / "package.json").read_text())["bin"]
        return pkg_dir / (bins if isinstance(bins, str) else bins[name])

    @property
    def conformance(self) -> list[str]:
        return [str(self.node), str(self.bin_js("@modelcontextprotocol/conformance", "conformance"))]

    @property
    def inspector(self) -> list[str]:
        return [str(self.node), str(self.bin_js("@modelcontextprotocol/inspector", "mcp-inspector"))]


class _DirLock:
    """An exclusive flock on ``.interop/.lock`` with a bounded wait."""

    def __init__(self, path: Path, timeout: float) -> None:
        self.path, self.timeout, self.fd = path, timeout, -1

    def __enter__(self) -> _DirLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(self.fd)
                    raise TimeoutError(f"another session has held {self.path} for over {self.timeout:.0f} s") from None
                time.sleep(0.5)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def _node_major(node: str) -> int:
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    m = re.match(r"v(\d+)\.", out.strip())
    return int(m.group(1)) if m else 0


def _node_package() -> str:
    system = {"linux": "linux", "darwin": "darwin"}.get(sys.platform)
    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower())
    if system is None or arch is None:
        raise RuntimeError(f"no Node {NODE_MAJOR} package for {sys.platform}/{platform.machine()}")
    return f"node-{system}-{arch}@{NODE_MAJOR}"


def _say(message: str) -> None:
    """One line on the terminal even while pytest captures output (a session fixture's setup is captured)."""
    print(f"\n[interop] {message}", file=sys.__stderr__, flush=True)


def _npm_install(npm: str | None, folder: Path, specs: list[str], env: dict[str, str],
                 say: Callable[[str], None] = _say) -> None:
    """Install ``specs`` into ``folder`` unless its marker says it already holds exactly them."""
    marker = folder / ".complete"
    wanted = "\n".join(specs)
    if marker.exists() and marker.read_text() == wanted:
        return
    say(f"fetching {', '.join(specs)} from the npm registry into {folder} (once: later runs reuse it; "
        f"the whole of {folder.parent} is about 480 MB)")
    if npm is None:
        raise RuntimeError("`npm` is not on PATH (install Node.js with npm to run the interop tests)")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "package.json").write_text(json.dumps({"name": f"openfunctions-interop-{folder.name}", "private": True}))
    cmd = [npm, "install", "--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=error", *specs]
    try:
        proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"`{' '.join(cmd)}` took over {INSTALL_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise RuntimeError(f"`{' '.join(cmd)}` exited {proc.returncode}: {tail}")
    marker.write_text(wanted)
    say(f"installed {', '.join(specs)} in {folder}")


def provision_node_peers(cache: Path = CACHE) -> NodePeers:
    """Install (or find) Node 22 and the pinned peers under ``cache``; raise RuntimeError on failure."""
    npm = shutil.which("npm")  # needed only when something is not installed yet
    home = cache / "home"
    base_env = {
        **os.environ,
        "npm_config_cache": str(cache / "npm-cache"),
        "npm_config_update_notifier": "false",
        "NO_UPDATE_NOTIFIER": "1",
    }
    with _DirLock(cache / ".lock", LOCK_TIMEOUT_S):
        home.mkdir(parents=True, exist_ok=True)
        system_node = shutil.which("node")
        if system_node and _node_major(system_node) >= NODE_MAJOR:
            node = Path(system_node)
        else:
            node_dir = cache / "node"
            pkg = _node_package()
            _npm_install(npm, node_dir, [pkg], base_env)
            node = node_dir / "node_modules" / pkg.rsplit("@", 1)[0] / "bin" / "node"
            if _node_major(str(node)) < NODE_MAJOR:
                raise RuntimeError(f"{node} did not report Node >= {NODE_MAJOR}")
        # npm itself runs on whichever node comes first on PATH: make that ours.
        env = {**base_env, "PATH": f"{node.parent}{os.pathsep}{base_env.get('PATH', '')}", "HOME": str(home)}
        peers_dir = cache / "peers"
        _npm_install(npm, peers_dir, [CONFORMANCE_SPEC, INSPECTOR_SPEC], env)
    return NodePeers(node=node, peers_dir=peers_dir, home=home, env=env)


@pytest.fixture(scope="session")
def node_peers(request) -> NodePeers:
    capture = request.config.pluginmanager.getplugin("capturemanager")
    try:
        if capture is not None:  # let the fetch lines through to the terminal
            with capture.global_and_fixture_disabled():
                return provision_node_peers()
        return provision_node_peers()
    except (RuntimeError, TimeoutError, OSError) as e:
        _unavailable(str(e))
        raise  # unreachable: _unavailable skips or fails
