"""The handshake-era fixture tools (content types, logging, progress, sampling, elicitation, errors, SSE reconnection, JSON Schema 2020-12) and the plain 2026-07-28 ones."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import anyio
import mcp_types as types

from openfunctions.core import ToolError, ToolExecutionContext, ToolResult

from ._common import (
    TEST_AUDIO_BASE64,
    _image,
    _log,
    _request_context,
    _text,
)

# -- tools -----------------------------------------------------------------------


async def _simple_text(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    return ToolResult.text("This is a simple text response for testing.")


async def _image_content(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    return ToolResult(content=[_image()])


async def _audio_content(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    return ToolResult(content=[{"type": "audio", "data": TEST_AUDIO_BASE64, "mimeType": "audio/wav"}])


async def _embedded_resource(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    return ToolResult(
        content=[
            {
                "type": "resource",
                "resource": {
                    "uri": "test://embedded-resource",
                    "mimeType": "text/plain",
                    "text": "This is an embedded resource content.",
                },
            }
        ]
    )


async def _multiple_content_types(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    return ToolResult(
        content=[
            _text("Multiple content types test:"),
            _image(),
            {
                "type": "resource",
                "resource": {
                    "uri": "test://mixed-content-resource",
                    "mimeType": "application/json",
                    "text": json.dumps({"test": "data", "value": 123}),
                },
            },
        ]
    )


async def _with_logging(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    for message in ("Tool execution started", "Tool processing data", "Tool execution completed"):
        await _log(ctx, "info", message)
    return ToolResult.text("Tool with logging executed successfully")


async def _with_progress(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100, f"Completed step {step} of 100")
    rc = _request_context(ctx)
    meta = getattr(rc, "meta", None) or {}
    token = meta.get("progress_token", meta.get("progressToken")) if isinstance(meta, Mapping) else None
    return ToolResult.text(str(token if token is not None else 0))


async def _sampling(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    rc = _request_context(ctx)
    if rc is None:
        return ToolResult.text("Sampling not supported: this call did not arrive over MCP")
    try:
        result = await rc.session.create_message(
            [types.SamplingMessage(role="user", content=types.TextContent(type="text", text=params["prompt"]))],
            max_tokens=100,
            related_request_id=rc.request_id,
        )
    except Exception as exc:  # the client may not support sampling: report, don't fail
        return ToolResult.text(f"Sampling not supported or error: {exc}")
    content = result.content
    text = content.text if getattr(content, "type", None) == "text" else "No response"
    return ToolResult.text(f"LLM response: {text}")


async def _elicit(ctx: ToolExecutionContext, message: str, schema: dict[str, Any], label: str) -> ToolResult:
    rc = _request_context(ctx)
    if rc is None:
        return ToolResult.text("Elicitation not supported: this call did not arrive over MCP")
    try:
        result = await rc.session.elicit_form(message, schema, related_request_id=rc.request_id)
    except Exception as exc:
        return ToolResult.text(f"Elicitation not supported or error: {exc}")
    content = json.dumps(result.content or {}) if result.action == "accept" else "{}"
    return ToolResult.text(f"{label}: action={result.action}, content={content}")


_USER_RESPONSE_SCHEMA = {
    "type": "object",
    "properties": {"response": {"type": "string", "description": "User's response"}},
    "required": ["response"],
}

# SEP-1034: a default for every primitive type.
_DEFAULTS_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "User name", "default": "John Doe"},
        "age": {"type": "integer", "description": "User age", "default": 30},
        "score": {"type": "number", "description": "User score", "default": 95.5},
        "status": {
            "type": "string",
            "description": "User status",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "description": "Verification status", "default": True},
    },
}

# SEP-1330: the enum shapes a form may use.
_ENUMS_SCHEMA = {
    "type": "object",
    "properties": {
        "untitledSingle": {
            "type": "string",
            "description": "Simple enum without titles",
            "enum": ["active", "inactive", "pending"],
        },
        "titledSingle": {
            "type": "string",
            "description": "Enum with titled options (oneOf)",
            "oneOf": [
                {"const": "low", "title": "Low Priority"},
                {"const": "medium", "title": "Medium Priority"},
                {"const": "high", "title": "High Priority"},
            ],
        },
        "untitledMulti": {
            "type": "array",
            "description": "Multi-select without titles",
            "items": {"type": "string", "enum": ["read", "write", "execute"]},
        },
        "titledMulti": {
            "type": "array",
            "description": "Multi-select with titled options",
            "items": {
                "anyOf": [
                    {"const": "feature", "title": "New Feature"},
                    {"const": "bug", "title": "Bug Fix"},
                    {"const": "docs", "title": "Documentation"},
                ]
            },
        },
        "legacyEnum": {
            "type": "string",
            "description": "Legacy enum with enumNames",
            "enum": ["small", "medium", "large"],
            "enumNames": ["Small Size", "Medium Size", "Large Size"],
        },
    },
    "required": ["untitledSingle", "titledSingle", "untitledMulti", "titledMulti", "legacyEnum"],
}


async def _elicitation(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    return await _elicit(ctx, params["message"], _USER_RESPONSE_SCHEMA, "User response")


async def _elicitation_defaults(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    return await _elicit(ctx, "Please provide user information", _DEFAULTS_SCHEMA, "Elicitation result")


async def _elicitation_enums(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    return await _elicit(
        ctx, "Please select values using different enum schema types", _ENUMS_SCHEMA, "Elicitation completed"
    )


async def _error_handling(params: dict[str, Any], ctx: ToolExecutionContext) -> None:
    raise ToolError("This tool intentionally returns an error for testing", effect_happened=False)


async def _reconnection(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    """SEP-1699: close this call's SSE stream mid-call; the client reconnects and still gets the result."""
    await _log(ctx, "info", "Before disconnect")
    rc = _request_context(ctx)
    close = getattr(rc, "close_sse_stream", None)
    if close is not None:
        await close()
        # Give the client its retry interval to reconnect before the rest of the stream is sent.
        await anyio.sleep(0.2)
    await _log(ctx, "info", "After reconnect")
    return ToolResult.text("Reconnection test completed")


# SEP-1613 / SEP-2106: a 2020-12 schema whose keywords must reach the client untouched.
JSON_SCHEMA_2020_12_INPUT = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


async def _json_schema_tool(params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
    return {"received": params}

async def _logging_tool(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    # The SDK drops these unless the request opted in with a log level (2026-07-28) -- that is what is tested.
    for message in ("logging tool started", "logging tool finished"):
        await _log(ctx, "info", message)
    return ToolResult.text("logging tool done")


async def _greet(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    return ToolResult.text(f"Hello, {params['name']}!")


async def _custom_headers(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    return ToolResult.text(f"region={params.get('region')}")


_CUSTOM_HEADERS_INPUT = {
    "type": "object",
    "properties": {
        # SEP-2243: the client mirrors this argument into an ``Mcp-Param-Region`` header; the SDK's
        # HTTP transport checks header and body agree before the call reaches us.
        "region": {"type": "string", "description": "Region the call is for", "x-mcp-header": "Region"},
    },
    "required": ["region"],
}
