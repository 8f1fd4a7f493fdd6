"""The read tool end to end: a real `openfunctions-mcp serve --profile artifacts` over stdio."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import pytest

from openfunctions.artifacts import ArtifactStore

pytestmark = pytest.mark.anyio


async def test_artifacts_profile_reads_chunks_over_stdio(tmp_path):
    data = os.urandom(40_000)
    store = await ArtifactStore(tmp_path / "artifacts").open()
    ref = await store.put(data, media_type="application/octet-stream", scope="e2e")
    store.close()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "openfunctions.servers", "serve", "--profile", "artifacts",
         "--data-dir", str(tmp_path), "--no-journal"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )

    def call(msg_id: int, method: str, params: dict) -> dict:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}) + "\n")
        proc.stdin.flush()
        reply = json.loads(proc.stdout.readline())
        assert reply["id"] == msg_id, reply
        return reply["result"]

    try:
        call(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "artifacts-test", "version": "0"}})
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        tools = {t["name"]: t for t in call(2, "tools/list", {})["tools"]}
        assert tools["of_artifact_read"]["annotations"]["readOnlyHint"] is True
        out, offset, n = bytearray(), 0, 3
        while True:
            result = call(n, "tools/call", {"name": "of_artifact_read",
                                            "arguments": {"artifact_id": ref.id, "offset": offset}})
            n += 1
            assert not result.get("isError")
            chunk = result["structuredContent"]
            assert chunk["sha256"] == ref.sha256 and chunk["total_size"] == len(data)
            out += base64.b64decode(chunk["data_base64"])
            offset += chunk["length"]
            if chunk["eof"]:
                break
        assert bytes(out) == data
        refused = call(n, "tools/call", {"name": "of_artifact_read", "arguments": {"artifact_id": "../../etc/passwd"}})
        assert refused["isError"] is True and "no artifact with id" in refused["content"][0]["text"]
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stdout.close()
    assert proc.returncode == 0
