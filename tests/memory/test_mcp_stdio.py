"""The memory profile through the MCP surface: the SDK client against a real `serve --profile memory` subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import mcp_types as types
import pytest
from mcp import Client

from tests.interop._serve import stdio_params

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
RECEIPT_KEY = "dev.openfunctions/receipt"


async def _session(params, *, expect_fact: str | None = None) -> str:
    async with Client(params, mode="legacy", read_timeout_seconds=60) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert {"memory_save_fact", "memory_search", "memory_get_thread", "memory_forget"} <= set(tools)
        assert tools["memory_forget"].annotations.destructive_hint is True
        assert tools["memory_search"].annotations.read_only_hint is True
        if expect_fact is not None:
            found = await client.call_tool("memory_search", {"query": "favourite colour"})
            assert not found.is_error
            # a shared database (OPENFUNCTIONS_TEST_DATABASE_URL) may hold facts of earlier runs
            assert expect_fact in [r["id"] for r in found.structured_content["results"]]
            gone = await client.call_tool("memory_forget", {"id": expect_fact})
            assert gone.structured_content == {"id": expect_fact, "forgotten": True}
            assert gone.meta[RECEIPT_KEY]["outcome"] == "succeeded"
            return expect_fact
        saved = await client.call_tool("memory_save_fact", {"text": "Dana's favourite colour is green", "source": "chat"})
        assert not saved.is_error, saved.content
        receipt = saved.meta[RECEIPT_KEY]
        assert receipt["tool"] == "memory_save_fact" and receipt["outcome"] == "succeeded"
        fact_id = saved.structured_content["fact"]["id"]
        assert json.loads(saved.content[0].text)["fact"]["id"] == fact_id
        for i in range(3):
            await client.call_tool("memory_append_message", {"thread_id": "chat-1", "role": "user", "content": f"m{i}"})
        page = await client.call_tool("memory_get_thread", {"thread_id": "chat-1", "limit": 2})
        assert [m["content"] for m in page.structured_content["messages"]] == ["m2", "m1"]
        assert page.structured_content["next_before"] == 2
        bad = await client.call_tool("memory_get_thread", {"thread_id": "../../etc/passwd"})
        assert bad.is_error and bad.meta[RECEIPT_KEY]["outcome"] == "rejected"
        huge = await client.call_tool("memory_save_fact", {"text": "x" * 20_000})
        assert huge.is_error
        text = "".join(c.text for c in huge.content if isinstance(c, types.TextContent))
        assert "text" in text
        return fact_id


async def test_memory_profile_over_stdio_persists_across_restarts(tmp_path: Path):
    fact = await _session(stdio_params("memory", tmp_path))
    await _session(stdio_params("memory", tmp_path), expect_fact=fact)  # a new server process, same data dir
    assert (tmp_path / "store" / "memory" / "store.journal").exists()


async def test_memory_profile_on_postgresql(tmp_path: Path, pg_dsn):
    fact = await _session(stdio_params("memory", tmp_path / "a", "--store", pg_dsn))
    # another server, another data dir: the facts are in PostgreSQL
    await _session(stdio_params("memory", tmp_path / "b", "--store", pg_dsn), expect_fact=fact)
    assert not (tmp_path / "a" / "store" / "memory").exists()
