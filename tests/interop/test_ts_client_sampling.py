"""A third-party client lends its model to an agent on protocol 2026-07-28: the TypeScript SDK v2
(``@modelcontextprotocol/client``, installed with the pinned Inspector) drives our stdio server.

Its sampling handler plays the model (``ts_sampling_client.mjs``); the SDK answers each
InputRequiredResult and retries by itself, and the agent's run resumes between the legs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from openfunctions.agents import read_runs

from ._serve import cli_command, serve_args

pytestmark = [pytest.mark.interop, pytest.mark.slow]
HERE = Path(__file__).resolve().parent
RECEIPT = "dev.openfunctions/receipt"


def test_typescript_sdk_client_on_2026_07_28_lends_its_model_to_an_agent(node_peers: Any, tmp_path: Path) -> None:
    modules = node_peers.peers_dir / "node_modules"
    pkg = modules / "@modelcontextprotocol" / "client" / "package.json"
    assert pkg.exists(), f"the Inspector's install no longer brings @modelcontextprotocol/client ({pkg})"
    version = json.loads(pkg.read_text())["version"]
    data = tmp_path / "data"
    env = {**node_peers.env, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "agents"), os.environ.get("PYTHONPATH", "")])}
    server = [*cli_command(), *serve_args("agents", data, "--module", "fixture_agents:agents")]
    proc = subprocess.run([str(node_peers.node), str(HERE / "ts_sampling_client.mjs"), str(modules), *server],
                          env=env, cwd=node_peers.home, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"@modelcontextprotocol/client {version}: {proc.stderr[-3000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["version"] == "2026-07-28", out
    # Each request reached the handler as an entry of an InputRequiredResult (its key), not a server->client request.
    assert [a["id"] for a in out["asked"]] == ["sampling-0", "sampling-1"], out["asked"]
    assert out["asked"][0]["tools"] == ["lookup"] and out["asked"][1]["messages"] == 3
    result = out["result"]
    assert not result.get("isError") and result["structuredContent"]["text"] == "Paris.", result
    run = read_runs(data)[result["structuredContent"]["run_id"]]
    assert run.status == "completed" and run.rounds[0]["model"] == "ts-host-model"
    assert run.started["parent_receipt_id"] == result["_meta"][RECEIPT]["receipt_id"]
    assert run.rounds[0]["tool_calls"][0]["outcome"] == "succeeded"
