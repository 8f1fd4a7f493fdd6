"""The conformance fixtures are ordinary tools: they run through the registry's executor."""

from __future__ import annotations

import pytest

from openfunctions.core import MemoryJournalSink
from openfunctions.servers.conformance import (
    JSON_SCHEMA_2020_12_INPUT,
    TEST_IMAGE_BASE64,
    ConformanceFixtures,
    create_conformance_registry,
)

pytestmark = pytest.mark.anyio


def test_build_returns_registry_and_installer() -> None:
    built = create_conformance_registry()
    assert isinstance(built, ConformanceFixtures) and callable(built.install)
    names = {t.name for t in built.registry.list()}
    assert {
        "test_simple_text", "test_image_content", "test_audio_content", "test_embedded_resource",
        "test_multiple_content_types", "test_tool_with_logging", "test_tool_with_progress", "test_sampling",
        "test_elicitation", "test_elicitation_sep1034_defaults", "test_elicitation_sep1330_enums",
        "test_error_handling", "test_reconnection", "json_schema_2020_12_tool",
    } <= names
    # Each build is independent (its own registry and event bus).
    assert create_conformance_registry().registry is not built.registry


async def test_content_blocks_pass_through_the_executor() -> None:
    registry = create_conformance_registry().registry
    sink = MemoryJournalSink()
    registry.executor.sink = sink
    mixed = await registry.execute_detailed("test_multiple_content_types", {})
    assert [c["type"] for c in mixed.result.content] == ["text", "image", "resource"]
    assert mixed.result.content[1]["data"] == TEST_IMAGE_BASE64
    assert mixed.receipt.outcome == "succeeded"
    assert [r.tool for r in sink.receipts] == ["test_multiple_content_types"]


async def test_error_fixture_is_a_failed_receipt_with_the_message() -> None:
    registry = create_conformance_registry().registry
    out = await registry.execute_detailed("test_error_handling", {})
    assert out.result.is_error
    assert out.result.content[0]["text"] == "This tool intentionally returns an error for testing"
    assert out.receipt.outcome == "failed"


async def test_arguments_are_validated_before_the_fixture_runs() -> None:
    registry = create_conformance_registry().registry
    out = await registry.execute_detailed("test_sampling", {"prompt": 7})
    assert out.receipt.outcome == "rejected" and not out.receipt.handler_started
    assert "prompt" in out.result.content[0]["text"]


async def test_client_facing_fixtures_degrade_without_an_mcp_request() -> None:
    registry = create_conformance_registry().registry
    out = await registry.execute_detailed("test_sampling", {"prompt": "hi"})
    assert out.result.content[0]["text"].startswith("Sampling not supported")
    asked = await registry.execute_detailed("test_input_required_result_elicitation", {})
    assert asked.result.structured["resultType"] == "input_required"
    assert set(asked.result.structured["inputRequests"]) == {"user_name"}


def test_2020_12_schema_is_registered_verbatim() -> None:
    tool = create_conformance_registry().registry.get("json_schema_2020_12_tool")
    assert tool.input_schema == JSON_SCHEMA_2020_12_INPUT
