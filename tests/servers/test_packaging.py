"""The built wheel works from a clean environment, the way a user runs it: ``uvx``.

Takes the release wheel (the session fixture ``dists`` in conftest.py: built from the sdist, the one
test_release.py checks), gets ``uv`` (installing it
into a scratch venv when it is not on PATH), and runs the command from the
wheel and from the checkout in uv's fresh environments: ``--help``,
``--version``, every entry of claude_desktop_config.example.json, and a real
stdio session. Skipped only when uv cannot be installed (offline).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from .conftest import REPO
from .test_cli import CONFIG, openfunctions_args

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(tmp_path_factory, dists):
    tmp = tmp_path_factory.mktemp("wheel")
    _, wheel = dists
    uvx = shutil.which("uvx")
    if uvx is None:
        venv = tmp / "uv-venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        proc = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "uv"], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            pytest.skip(f"cannot install uv (offline?): {proc.stderr.strip()[-300:]}")
        uvx = str(venv / "bin" / "uvx")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env["UV_CACHE_DIR"] = str(tmp / "uv-cache")
    env["UV_NO_CONFIG"] = "1"
    return wheel, uvx, env


def run(built, *args: str, input: bytes | None = None, source: str | None = None) -> subprocess.CompletedProcess:
    wheel, uvx, env = built
    return subprocess.run(
        [uvx, "--isolated", "--from", source or str(wheel), "openfunctions-mcp", *args],
        input=input, capture_output=True, timeout=600, env=env, cwd="/",
    )


def test_wheel_help_and_version(built):
    helped = run(built, "--help")
    assert helped.returncode == 0, helped.stderr.decode()[-2000:]
    for word in (b"serve", b"demo", b"journal"):
        assert word in helped.stdout
    version = run(built, "--version")
    assert version.returncode == 0 and version.stdout.startswith(b"openfunctions-mcp ")


def test_checkout_runs_with_uvx_from_dot(built):
    proc = run(built, "serve", "--help", source=str(REPO))
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert b"--profile" in proc.stdout


# Every entry's arguments through the built package's own ``main`` (with ``--help``: parsed, nothing served),
# in one interpreter of the wheel's uvx environment: the console script itself is test_wheel_help_and_version's.
_PARSE_ALL = """
import json, sys
from openfunctions.servers import cli
failed = {}
for name, args in json.loads(sys.argv[1]).items():
    try:
        cli.main([*args, "--help"])
        failed[name] = "returned instead of exiting after --help"
    except SystemExit as exc:
        if exc.code not in (0, None):
            failed[name] = f"exit {exc.code}"
print(json.dumps({"module": cli.__file__, "failed": failed}))
"""


def test_every_example_config_entry_parses_in_the_built_package(built):
    entries = {name: openfunctions_args(entry) for name, entry in json.loads(CONFIG.read_text())["mcpServers"].items()}
    wheel, uvx, env = built
    proc = subprocess.run([uvx, "--isolated", "--from", str(wheel), "python", "-c", _PARSE_ALL, json.dumps(entries)],
                          capture_output=True, timeout=600, env=env, cwd="/")
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    report = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert not report["module"].startswith(str(REPO)), report  # the wheel's code, not this checkout's
    assert report["failed"] == {}, (report, proc.stderr.decode()[-2000:])


def test_wheel_serves_a_stdio_session(built, tmp_path):
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "of_hash_text", "arguments": {"text": "a"}}},
    ]
    data = b"".join(json.dumps(m).encode() + b"\n" for m in lines)
    proc = run(built, "serve", "--data-dir", str(tmp_path / "data"), input=data)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    out = [json.loads(line) for line in proc.stdout.splitlines()]
    call = next(m for m in out if m.get("id") == 2)
    assert call["result"]["structuredContent"]["hex"].startswith("ca978112")
    assert call["result"]["_meta"]["dev.openfunctions/receipt"]["outcome"] == "succeeded"
