"""A workflow served over MCP: `openfunctions-mcp serve --module ...` as a real stdio subprocess, the SDK client.

With the example tools on (`--example-tools`), the server merges the module's registry with them; the workflow
tool's steps must still run through the server's journaled executor, not a registry of their own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from openfunctions.core.journal import read_records

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RECEIPT_META_KEY = "dev.openfunctions/receipt"


@pytest.mark.anyio
async def test_a_workflow_tool_served_over_stdio_runs_its_steps_as_journaled_child_calls(tmp_path):
    data = tmp_path / "data"
    env = dict(os.environ, PYTHONPATH=str(ROOT), WF_TEST_DIR=str(tmp_path), PYTHONUNBUFFERED="1")
    env.pop("WF_TEST_SLEEP_IN", None)
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "openfunctions.servers", "serve", "--module", "tests.workflows._app:served", "--example-tools",
              "--data-dir", str(data)],
        env=env, cwd=str(ROOT),
    )
    async with Client(server, read_timeout_seconds=60) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        ok = await client.call_tool("checkout", {"amount": 10})
        bad = await client.call_tool("checkout", {"amount": "ten"})
    assert {"checkout", "charge", "slow_read", "of_hash_text"} <= set(tools)  # the example tools are served too
    assert tools["checkout"].output_schema["required"] == ["ok", "balance"]
    assert not ok.is_error and ok.structured_content == {"ok": True, "balance": 90}
    parent = ok.meta[RECEIPT_META_KEY]["receipt_id"]
    assert bad.is_error and "$.amount" in bad.content[0].text

    settled = [r.data for f in sorted((data / "journal").glob("*.journal")) for r in read_records(f)
               if r.type not in ("start",) and "tool" in r.data and "outcome" in r.data]
    children = {d["tool"]: d for d in settled if d.get("parent_receipt_id") == parent}
    assert set(children) == {"charge", "slow_read"}
    assert all(d["outcome"] == "succeeded" for d in children.values())
    assert (tmp_path / "charges.txt").read_text().count("charge 10") == 1
