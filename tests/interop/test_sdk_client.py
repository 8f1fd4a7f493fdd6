"""The official MCP SDK client (``mcp.Client``) against our real server processes.

Over a stdio subprocess and over streamable HTTP on a real 127.0.0.1 port,
in both protocol eras (``auto`` negotiates 2026-07-28, ``legacy`` forces the
initialize handshake): the tools list, a call, and the receipt in ``_meta``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from ._serve import http_server, stdio_params

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RECEIPT_KEY = "dev.openfunctions/receipt"
MODES = ["auto", "legacy"]


def _receipt(result: Any) -> dict[str, Any]:
    meta = result.meta or {}
    assert RECEIPT_KEY in meta, f"no receipt in _meta: {meta!r}"
    return meta[RECEIPT_KEY]


async def _list_call_receipt(client: Client) -> None:
    listed = await client.list_tools()
    tools = {t.name: t for t in listed.tools}
    assert {"test_simple_text", "test_error_handling", "json_schema_2020_12_tool"} <= set(tools)
    # Registered schemas reach the client untouched (2020-12 keywords included).
    schema = tools["json_schema_2020_12_tool"].input_schema
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["additionalProperties"] is False and "$anchor" in schema["$defs"]["address"]

    ok = await client.call_tool("test_simple_text", {})
    assert not ok.is_error
    assert [c.text for c in ok.content if isinstance(c, types.TextContent)] == [
        "This is a simple text response for testing."
    ]
    receipt = _receipt(ok)
    assert receipt["tool"] == "test_simple_text"
    assert receipt["outcome"] == "succeeded"
    assert receipt["receipt_id"].startswith("rcpt_")
    assert ok.structured_content is None  # the receipt travels in _meta only

    failed = await client.call_tool("test_error_handling", {})
    assert failed.is_error
    assert "intentionally returns an error" in failed.content[0].text
    assert _receipt(failed)["outcome"] == "failed"


@pytest.mark.parametrize("mode", MODES)
async def test_sdk_client_over_stdio_subprocess(tmp_path: Path, mode: str) -> None:
    async with Client(stdio_params("conformance", tmp_path), mode=mode, read_timeout_seconds=60) as client:
        await _list_call_receipt(client)


@pytest.mark.parametrize("mode", MODES)
async def test_sdk_client_over_http(tmp_path: Path, mode: str) -> None:
    with http_server("conformance", tmp_path) as url:
        async with Client(url, mode=mode, read_timeout_seconds=60) as client:
            await _list_call_receipt(client)


async def test_sdk_client_drives_input_required_round_trip_over_http(tmp_path: Path) -> None:
    """2026-07-28: the tool asks for input with an InputRequiredResult; the SDK client answers and retries."""
    asked: list[str] = []

    async def answer(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada"})

    with http_server("conformance", tmp_path) as url:
        async with Client(url, mode="auto", elicitation_callback=answer, read_timeout_seconds=60) as client:
            result = await client.call_tool("test_input_required_result_elicitation", {})
    assert asked == ["What is your name?"]
    assert result.content[0].text == "Hello, Ada!"
    assert _receipt(result)["outcome"] == "succeeded"
