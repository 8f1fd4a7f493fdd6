"""The MCP conformance suite's fixtures, served through our registry and executor.

The suite (npm ``@modelcontextprotocol/conformance``) calls tools, reads
resources and gets prompts by fixed names (``test_simple_text``,
``test://static-text``, ``test_simple_prompt``, ...) and checks what comes
back. Here those fixtures are ordinary :func:`define_tool` tools in a
:class:`ToolRegistry`, so a conformance run exercises the same path a real
host's call takes: validation, scheduling, receipts, the journal.

Two entry points, used by ``openfunctions-mcp serve --profile conformance``:

- :func:`build_conformance_registry` -- the fixture tools (``.registry``, a
  :class:`ToolRegistry`) and ``.install(server)``, which calls
- :func:`add_conformance_fixtures` -- registers the fixture resources,
  resource template and prompts on a server from
  :func:`openfunctions.servers.create_mcp_server`, plus the small protocol
  handlers the suite probes (``completion/complete``, ``resources/subscribe``
  and ``unsubscribe``, ``logging/setLevel``, ``subscriptions/listen``) and the
  2026-07-28 input-required envelope (:class:`_InputRequiredAdapter`).

Fixtures that talk back to the client (logging, sampling, elicitation,
closing the SSE stream) need the MCP request the call arrived on: the server
puts the SDK's ``ServerRequestContext`` into the execution context's
``metadata["mcp.request_context"]``. Called without one (directly through the
registry), they say so in their text result instead of failing.
"""

from __future__ import annotations

import base64
import json
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
import structlog
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import PromptsListChanged, ToolsListChanged
from mcp_types import MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from openfunctions.core import ToolError, ToolExecutionContext, ToolRegistry, ToolResult, define_tool

from ._tasks import TASK_METADATA_KEY
from .server import REQUEST_CONTEXT_KEY

log = structlog.get_logger("openfunctions.servers.conformance")

# A 1x1 PNG and a minimal WAV header: the suite only checks type, data and mimeType.
TEST_IMAGE_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
TEST_AUDIO_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

# The fixtures have no effects: they share the read pool, so a tool waiting on
# the client (sampling, elicitation) never blocks another scenario's call.
_FIXTURE = {"effect": "read", "parallel_safe": True, "idempotent": True}
_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


def _request_context(ctx: ToolExecutionContext) -> Any:
    return ctx.metadata.get(REQUEST_CONTEXT_KEY) if isinstance(ctx.metadata, Mapping) else None


def _image() -> dict[str, Any]:
    return {"type": "image", "data": TEST_IMAGE_BASE64, "mimeType": "image/png"}


def _text(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


async def _log(ctx: ToolExecutionContext, level: str, message: str) -> None:
    rc = _request_context(ctx)
    if rc is None:
        return
    # Request-scoped: on streamable HTTP the entry rides this call's response stream.
    await rc.session.send_log_message(level, message, related_request_id=rc.request_id)


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


# -- 2026-07-28 fixtures: multi-round-trip input (SEP-2322), stateless checks (SEP-2575) --
#
# In the stateless era a tool does not send server-to-client requests; it answers
# with an InputRequiredResult naming what it needs, and the client retries the
# call with ``inputResponses`` (and the echoed ``requestState``). A fixture returns
# that answer as its structured payload; :class:`_InputRequiredAdapter` lifts it
# into the protocol's result shape after our executor has run (and journaled) the
# call, and the SDK's ``RequestStateBoundary`` seals ``requestState``.

INPUT_REQUIRED = "input_required"
MRTR_TAG = "conformance-input-required"


def _mrtr_inputs(ctx: ToolExecutionContext) -> tuple[dict[str, Any], str | None]:
    """The retry's ``inputResponses`` and (already verified, plaintext) ``requestState``."""
    rc = _request_context(ctx)
    raw = getattr(rc, "params", None) or {}
    responses = raw.get("inputResponses") if isinstance(raw, Mapping) else None
    state = raw.get("requestState") if isinstance(raw, Mapping) else None
    return (dict(responses) if isinstance(responses, Mapping) else {}), (state if isinstance(state, str) else None)


def _input_required(requests: dict[str, Any], state: str | None = None) -> ToolResult:
    payload: dict[str, Any] = {"resultType": INPUT_REQUIRED, "inputRequests": requests}
    if state is not None:
        payload["requestState"] = state
    return ToolResult(content=[_text(f"input required: {', '.join(requests)}")], structured=payload)


def _elicit_request(message: str, prop: str, prop_type: str = "string") -> dict[str, Any]:
    return {
        "method": "elicitation/create",
        "params": {
            "message": message,
            "requestedSchema": {"type": "object", "properties": {prop: {"type": prop_type}}, "required": [prop]},
        },
    }


def _sampling_request(text: str, max_tokens: int) -> dict[str, Any]:
    return {
        "method": "sampling/createMessage",
        "params": {"messages": [{"role": "user", "content": {"type": "text", "text": text}}], "maxTokens": max_tokens},
    }


_ROOTS_REQUEST = {"method": "roots/list", "params": {}}


def _accepted(response: Any, field: str) -> Any:
    """A form field from an elicitation response (``{"action": "accept", "content": {...}}``)."""
    if isinstance(response, Mapping) and isinstance(response.get("content"), Mapping):
        return response["content"].get(field)
    return None


def _sampled_text(response: Any) -> str:
    content = response.get("content") if isinstance(response, Mapping) else None
    if isinstance(content, Mapping) and content.get("type") == "text":
        return str(content.get("text"))
    return "(no text)"


def _root_uris(response: Any) -> list[str]:
    roots = response.get("roots") if isinstance(response, Mapping) else None
    return [str(r.get("uri")) for r in roots if isinstance(r, Mapping)] if isinstance(roots, list) else []


async def _ir_elicitation(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    responses, _ = _mrtr_inputs(ctx)
    if "user_name" not in responses:  # first round, or a retry that answered something else: ask (again)
        return _input_required({"user_name": _elicit_request("What is your name?", "name")})
    return ToolResult.text(f"Hello, {_accepted(responses['user_name'], 'name')}!")


async def _ir_sampling(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    responses, _ = _mrtr_inputs(ctx)
    if "capital_question" not in responses:
        return _input_required({"capital_question": _sampling_request("What is the capital of France?", 100)})
    return ToolResult.text(f"The model answered: {_sampled_text(responses['capital_question'])}")


async def _ir_list_roots(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    responses, _ = _mrtr_inputs(ctx)
    if "client_roots" not in responses:
        return _input_required({"client_roots": _ROOTS_REQUEST})
    uris = _root_uris(responses["client_roots"])
    return ToolResult.text(f"Client roots ({len(uris)}): {', '.join(uris) or 'none'}")


async def _ir_request_state(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    responses, state = _mrtr_inputs(ctx)
    if "confirm" not in responses or state != "awaiting-confirmation":
        return _input_required(
            {"confirm": _elicit_request("Please confirm", "ok", "boolean")}, state="awaiting-confirmation"
        )
    return ToolResult.text(f"state-ok: confirmed={_accepted(responses['confirm'], 'ok')}")


async def _ir_multiple(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    responses, state = _mrtr_inputs(ctx)
    wanted = {
        "user_name": _elicit_request("What is your name?", "name"),
        "greeting": _sampling_request("Generate a greeting", 50),
        "client_roots": _ROOTS_REQUEST,
    }
    missing = {k: v for k, v in wanted.items() if k not in responses}
    if missing or state != "multi-pending":
        return _input_required(missing or wanted, state="multi-pending")
    name = _accepted(responses["user_name"], "name")
    greeting = _sampled_text(responses["greeting"])
    return ToolResult.text(f"{greeting} {name} (roots: {', '.join(_root_uris(responses['client_roots'])) or 'none'})")


async def _ir_multi_round(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    responses, state = _mrtr_inputs(ctx)
    if state is not None and state.startswith("round-2:") and "step2" in responses:
        name = state.removeprefix("round-2:")
        return ToolResult.text(f"{name}'s favorite color is {_accepted(responses['step2'], 'color')}")
    if state == "round-1" and "step1" in responses:
        name = _accepted(responses["step1"], "name")
        return _input_required(
            {"step2": _elicit_request("Step 2: What is your favorite color?", "color")}, state=f"round-2:{name}"
        )
    return _input_required({"step1": _elicit_request("Step 1: What is your name?", "name")}, state="round-1")


async def _ir_tampered_state(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    # Integrity is the RequestStateBoundary's: a tampered token never reaches this handler.
    responses, state = _mrtr_inputs(ctx)
    if "confirm" not in responses or state != "integrity-protected":
        return _input_required({"confirm": _elicit_request("Please confirm", "ok", "boolean")}, state="integrity-protected")
    return ToolResult.text("state verified")


def _client_capabilities(ctx: ToolExecutionContext) -> Any:
    rc = _request_context(ctx)
    session = getattr(rc, "session", None)
    return getattr(session, "client_capabilities", None)


async def _ir_capabilities(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    responses, _ = _mrtr_inputs(ctx)
    if responses:
        return ToolResult.text(f"received: {', '.join(sorted(responses))}")
    caps = _client_capabilities(ctx)
    requests: dict[str, Any] = {}
    if getattr(caps, "elicitation", None) is not None:
        requests["user_name"] = _elicit_request("What is your name?", "name")
    if getattr(caps, "sampling", None) is not None:
        requests["greeting"] = _sampling_request("Generate a greeting", 50)
    if getattr(caps, "roots", None) is not None:
        requests["client_roots"] = _ROOTS_REQUEST
    if not requests:
        return ToolResult.text("the client declared no capability this tool could ask through")
    return _input_required(requests)


async def _missing_capability(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    # Reached only when the client declared sampling (the adapter enforces the tool's declared requirement).
    responses, _ = _mrtr_inputs(ctx)
    if "answer" not in responses:
        return _input_required({"answer": _sampling_request("Say hello", 20)})
    return ToolResult.text(f"sampled: {_sampled_text(responses['answer'])}")


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

REQUIRED_CLIENT_CAPABILITIES_META = "dev.openfunctions/requiredClientCapabilities"


# -- tasks fixtures (io.modelcontextprotocol/tasks, SEP-2663) -----------------------
#
# Task-capable tools run through the executor like any other; the server decides
# whether a call becomes a task. These fixtures ask for it explicitly
# (``escalate``) so the suite's timing-sensitive checks are deterministic, and ask
# for input mid-task through ``request_input`` (``tasks/update`` answers it).

_TASK_OPTIONAL = {**_FIXTURE, "task_support": "optional"}
_TASK_REQUIRED = {**_FIXTURE, "task_support": "required"}


def _task(ctx: ToolExecutionContext) -> Any:
    return ctx.metadata.get(TASK_METADATA_KEY)


async def _slow_compute(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    seconds = float(params.get("seconds", 1))
    task = _task(ctx)
    if seconds > 0 and task is not None:
        await task.escalate()
    await anyio.sleep(seconds)
    return ToolResult.text(f"computed {params.get('label', 'result')!s} after {seconds:g}s")


async def _failing_job(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    task = _task(ctx)
    if task is not None:
        await task.escalate()
    await anyio.sleep(1)
    return ToolResult.text("failing_job failed as designed: the job reported an error", is_error=True)


async def _protocol_error_job(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    task = _task(ctx)
    if task is not None:
        await task.escalate()
    raise RuntimeError("protocol_error_job crashed as designed")


def _confirm_request(message: str, fields: dict[str, str]) -> dict[str, Any]:
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {"type": "object", "properties": {k: {"type": t} for k, t in fields.items()},
                                "required": list(fields)},
        },
    }


async def _confirm_delete(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    task = _task(ctx)
    filename = str(params.get("filename"))
    if task is None:
        return ToolResult.text(f"not deleting {filename}: confirming needs the tasks extension", is_error=True)
    answers = await task.request_input({"confirm": _confirm_request(f"Delete {filename}?", {"confirm": "boolean"})})
    if _accepted(answers["confirm"], "confirm"):
        return ToolResult.text(f"deleted {filename} (nothing real: a conformance fixture)")
    return ToolResult.text(f"kept {filename}")


async def _multi_input(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    task = _task(ctx)
    if task is None:
        return ToolResult.text("multi_input asks two questions at once: it needs the tasks extension", is_error=True)
    answers = await task.request_input({
        "name": _confirm_request("What is your name?", {"name": "string"}),
        "confirm": _confirm_request("Confirm?", {"confirm": "boolean"}),
    })
    return ToolResult.text(f"name={_accepted(answers['name'], 'name')} confirm={_accepted(answers['confirm'], 'confirm')}")


async def _tool_with_task(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
    # SEP-2663 + SEP-2322: gather input synchronously (an InputRequiredResult), then become a task.
    responses, _ = _mrtr_inputs(ctx)
    if "user_name" not in responses:
        return _input_required({"user_name": _elicit_request("What is your name?", "name")})
    name = _accepted(responses["user_name"], "name")
    task = _task(ctx)
    if task is not None:
        await task.escalate()
    await anyio.sleep(0.2)
    return ToolResult.text(f"Hello, {name}! (answered before the task, finished inside it)")


def _list_change_trigger(bus: InMemorySubscriptionBus, event: Any, what: str) -> Any:
    """A diagnostic hook: announce a list change on every ``subscriptions/listen`` stream.

    The fixture lists themselves stay fixed (the suite also checks that
    consecutive ``tools/list`` answers agree); the announcement is what is tested.
    """

    async def trigger(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
        await bus.publish(event)
        return ToolResult.text(f"{what} list change announced")

    return trigger


# The event bus each conformance registry's trigger tools publish on; the server
# side (subscriptions/listen) is attached by add_conformance_fixtures.
_EVENT_BUSES: "weakref.WeakKeyDictionary[ToolRegistry, InMemorySubscriptionBus]" = weakref.WeakKeyDictionary()


def _fixture(
    name: str,
    description: str,
    handler: Any,
    input_schema: dict[str, Any] | None = None,
    *,
    tags: tuple[str, ...] = (),
    meta: dict[str, Any] | None = None,
    capability: dict[str, Any] | None = None,
) -> Any:
    return define_tool(
        name=name,
        description=description,
        input_schema=input_schema if input_schema is not None else dict(_NO_ARGS),
        handler=handler,
        tags=("conformance", *tags),
        meta=meta,
        annotations={"read_only_hint": True, "open_world_hint": False},
        capability=capability or _FIXTURE,
    )


def conformance_tools(bus: InMemorySubscriptionBus | None = None) -> list[Any]:
    """Fresh definitions of every fixture tool the suite calls (trigger tools publish on ``bus``)."""
    bus = bus if bus is not None else InMemorySubscriptionBus()
    prompt_arg = {
        "type": "object",
        "properties": {"prompt": {"type": "string", "description": "The prompt to send to the LLM"}},
        "required": ["prompt"],
    }
    message_arg = {
        "type": "object",
        "properties": {"message": {"type": "string", "description": "The message to show the user"}},
        "required": ["message"],
    }
    return [
        _fixture("test_simple_text", "Tests simple text content response", _simple_text),
        _fixture("test_image_content", "Tests image content response", _image_content),
        _fixture("test_audio_content", "Tests audio content response", _audio_content),
        _fixture("test_embedded_resource", "Tests embedded resource content response", _embedded_resource),
        _fixture(
            "test_multiple_content_types",
            "Tests response with multiple content types (text, image, resource)",
            _multiple_content_types,
        ),
        _fixture("test_tool_with_logging", "Tests tool that emits log messages during execution", _with_logging),
        _fixture("test_tool_with_progress", "Tests tool that reports progress notifications", _with_progress),
        _fixture("test_sampling", "Tests server-initiated sampling (LLM completion request)", _sampling, prompt_arg),
        _fixture("test_elicitation", "Tests server-initiated elicitation (user input request)", _elicitation, message_arg),
        _fixture(
            "test_elicitation_sep1034_defaults",
            "Tests elicitation with default values for all primitive types (SEP-1034)",
            _elicitation_defaults,
        ),
        _fixture(
            "test_elicitation_sep1330_enums",
            "Tests elicitation with enum schema variations per SEP-1330",
            _elicitation_enums,
        ),
        _fixture("test_error_handling", "Tests error response handling", _error_handling),
        _fixture("test_reconnection", "Tests SSE polling by closing the stream mid-call (SEP-1699)", _reconnection),
        _fixture(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            _json_schema_tool,
            JSON_SCHEMA_2020_12_INPUT,
        ),
        _fixture("test_custom_headers", "Tool whose argument is mirrored into an Mcp-Param header (SEP-2243)",
                 _custom_headers, _CUSTOM_HEADERS_INPUT),
        _fixture("test_logging_tool", "Logs during execution (only when the request opted in)", _logging_tool),
        *(
            _fixture(name, description, handler, tags=(MRTR_TAG,))
            for name, description, handler in (
                ("test_input_required_result_elicitation", "Asks the user's name through an input request", _ir_elicitation),
                ("test_input_required_result_sampling", "Asks the client's model through an input request", _ir_sampling),
                ("test_input_required_result_list_roots", "Asks the client's roots through an input request", _ir_list_roots),
                ("test_input_required_result_request_state", "Round-trips requestState with its input request", _ir_request_state),
                ("test_input_required_result_multiple_inputs", "Asks for three inputs at once", _ir_multiple),
                ("test_input_required_result_multi_round", "Asks in two rounds, carrying state", _ir_multi_round),
                ("test_input_required_result_tampered_state", "Relies on integrity-protected requestState", _ir_tampered_state),
                ("test_input_required_result_capabilities", "Asks only through capabilities the client declared", _ir_capabilities),
                ("test_streaming_elicitation", "Elicits through an input request, never a request on the stream", _ir_elicitation),
            )
        ),
        _fixture(
            "test_missing_capability", "Needs the client's sampling capability", _missing_capability,
            tags=(MRTR_TAG,), meta={REQUIRED_CLIENT_CAPABILITIES_META: {"sampling": {}}},
        ),
        _fixture(
            "greet", "Greets by name; a plain synchronous tool (the tasks scenarios' sync fixture)", _greet,
            {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        ),
        _fixture(
            "slow_compute", "Sleeps `seconds` then answers; a task when seconds > 0 (tasks fixture)", _slow_compute,
            {"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0}, "label": {"type": "string"}}},
            capability=_TASK_OPTIONAL,
        ),
        _fixture("failing_job", "Runs only as a task; reports a tool error after about a second", _failing_job,
                 capability=_TASK_REQUIRED),
        _fixture("protocol_error_job", "A task whose handler crashes (a protocol-level failure)", _protocol_error_job,
                 capability=_TASK_OPTIONAL),
        _fixture(
            "confirm_delete", "Asks the user to confirm through the task (input_required), then answers", _confirm_delete,
            {"type": "object", "properties": {"filename": {"type": "string"}}, "required": ["filename"]},
            capability=_TASK_OPTIONAL,
        ),
        _fixture("multi_input", "Asks two questions at once through the task", _multi_input, capability=_TASK_OPTIONAL),
        _fixture("test_tool_with_task", "Asks for a name (input required), then finishes as a task", _tool_with_task,
                 tags=(MRTR_TAG,), capability=_TASK_REQUIRED),
        _fixture("test_trigger_tool_change", "Announces a tools list change to listening clients",
                 _list_change_trigger(bus, ToolsListChanged(), "tools")),
        _fixture("test_trigger_prompt_change", "Announces a prompts list change to listening clients",
                 _list_change_trigger(bus, PromptsListChanged(), "prompts")),
    ]


@dataclass(frozen=True)
class ConformanceFixtures:
    """The conformance profile: the fixture tools' registry, and what to add to a server.

    ``install(server)`` registers the resources, prompts and protocol handlers
    (:func:`add_conformance_fixtures`); the ``openfunctions-mcp`` profile loader
    calls it on the server it creates for ``registry``.
    """

    registry: ToolRegistry
    instructions: str = (
        "The MCP conformance suite's fixtures (test_* tools, test:// resources, test_* prompts), "
        "executed through the openfunctions executor: every tool result carries a receipt in _meta."
    )

    def install(self, server: Any) -> None:
        add_conformance_fixtures(server)


def build_conformance_registry() -> ConformanceFixtures:
    """The conformance suite's fixture tools in a fresh registry (``.registry``), plus ``.install(server)``."""
    bus = InMemorySubscriptionBus()
    registry = ToolRegistry(conformance_tools(bus))
    _EVENT_BUSES[registry] = bus
    return ConformanceFixtures(registry)


# -- resources, prompts and the protocol handlers the suite probes ----------------

WATCHED_RESOURCE_TEXT = "Watched resource content"


def _template_data(variables: Mapping[str, Any]) -> str:
    ident = variables.get("id")
    return json.dumps({"id": ident, "templateTest": True, "data": f"Data for ID: {ident}"})


def _prompt_with_arguments(args: Mapping[str, str]) -> list[dict[str, Any]]:
    text = f"Prompt with arguments: arg1='{args['arg1']}', arg2='{args['arg2']}'"
    return [{"role": "user", "content": _text(text)}]


def _prompt_with_embedded_resource(args: Mapping[str, str]) -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": {
                "type": "resource",
                "resource": {
                    "uri": args["resourceUri"],
                    "mimeType": "text/plain",
                    "text": "Embedded resource content for testing.",
                },
            },
        },
        {"role": "user", "content": _text("Please process the embedded resource above.")},
    ]


def _prompt_with_image(args: Mapping[str, str]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": _image()},
        {"role": "user", "content": _text("Please analyze the image above.")},
    ]


class _Subscriptions:
    """The URIs a client subscribed to (the suite only checks that the calls succeed)."""

    def __init__(self) -> None:
        self.uris: set[str] = set()

    async def subscribe(self, ctx: Any, params: types.SubscribeRequestParams) -> dict[str, Any]:
        self.uris.add(str(params.uri))
        return {}

    async def unsubscribe(self, ctx: Any, params: types.UnsubscribeRequestParams) -> dict[str, Any]:
        self.uris.discard(str(params.uri))
        return {}


async def _set_logging_level(ctx: Any, params: types.SetLevelRequestParams) -> dict[str, Any]:
    # Log entries are request-scoped and always sent in the handshake era; the level is acknowledged only.
    log.info("logging_level_set", level=params.level)
    return {}


async def _complete(ctx: Any, params: types.CompleteRequestParams) -> dict[str, Any]:
    # No fixture argument has suggestions; the capability and the response shape are what is tested.
    return {"completion": {"values": [], "total": 0, "hasMore": False}}


INPUT_REQUIRED_PROMPT = "test_input_required_result_prompt"


class _InputRequiredAdapter:
    """Server middleware: the protocol envelope around fixture results (2026-07-28 era).

    - ``tools/call`` of a tool whose ``_meta`` declares required client
      capabilities is refused with ``-32021`` (MissingRequiredClientCapability)
      when the request did not declare them -- before anything executes;
    - a fixture tagged :data:`MRTR_TAG` whose structured payload is an
      ``input_required`` answer is returned as an InputRequiredResult, keeping
      the receipt in ``_meta`` (the call itself ran through the executor);
    - ``prompts/get`` of :data:`INPUT_REQUIRED_PROMPT` asks for its context first.
    """

    def __init__(self, registry: ToolRegistry) -> None:
        self.registry = registry

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        if ctx.method == "prompts/get" and params.get("name") == INPUT_REQUIRED_PROMPT:
            responses = params.get("inputResponses")
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and not (
                isinstance(responses, Mapping) and "user_context" in responses
            ):
                return {
                    "resultType": INPUT_REQUIRED,
                    "inputRequests": {
                        "user_context": _elicit_request("What context should the prompt use?", "context")
                    },
                }
            return await call_next(ctx)
        if ctx.method != "tools/call":
            return await call_next(ctx)
        name = params.get("name")
        tool = self.registry.get(name) if isinstance(name, str) and name in self.registry else None
        if tool is None:
            return await call_next(ctx)
        required = tool.meta.get(REQUIRED_CLIENT_CAPABILITIES_META)
        if isinstance(required, Mapping):
            caps = getattr(ctx.session, "client_capabilities", None)
            missing = {k: v for k, v in required.items() if getattr(caps, k, None) is None}
            if missing:
                raise MCPError(
                    MISSING_REQUIRED_CLIENT_CAPABILITY,
                    f"tool {name!r} needs client capabilities the request did not declare: {', '.join(missing)}",
                    data={"requiredCapabilities": missing},
                )
        result = await call_next(ctx)
        structured = result.get("structuredContent") if isinstance(result, Mapping) else None
        if (
            MRTR_TAG in tool.tags
            and ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
            and isinstance(structured, Mapping)
            and structured.get("resultType") == INPUT_REQUIRED
        ):
            lifted = {k: v for k, v in structured.items() if k in ("resultType", "inputRequests", "requestState")}
            if "_meta" in result:
                lifted["_meta"] = result["_meta"]
            return lifted
        return result


def _prompt_with_context(args: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": _text("Answer using the context the user supplied.")}]


def add_conformance_fixtures(server: Any) -> None:
    """Register the suite's resources, template, prompts and probed handlers on ``server``.

    ``server`` is what :func:`openfunctions.servers.create_mcp_server` returns
    (``add_resource``, ``add_resource_template``, ``add_prompt``, and the SDK
    low-level server as ``.lowlevel``). Call before serving: capabilities are
    derived from the registered handlers when a connection starts.
    """
    binary = base64.b64decode(TEST_IMAGE_BASE64)
    server.add_resource(
        "test://static-text", "static_text_resource", "text/plain",
        lambda: "This is the content of the static text resource.",
        description="A static text resource for testing",
    )
    server.add_resource(
        "test://static-binary", "static_binary_resource", "image/png", lambda: binary,
        description="A static binary resource (image) for testing",
    )
    server.add_resource(
        "test://watched-resource", "watched_resource", "text/plain", lambda: WATCHED_RESOURCE_TEXT,
        description="A resource that can be subscribed to for updates",
    )
    server.add_resource_template(
        "test://template/{id}/data", "template_resource", "application/json", _template_data,
        description="A resource template with parameter substitution",
    )
    server.add_prompt(
        "test_simple_prompt", "A simple prompt without arguments", [],
        lambda args: [{"role": "user", "content": _text("This is a simple prompt for testing.")}],
    )
    server.add_prompt(
        "test_prompt_with_arguments", "A prompt with required arguments",
        [
            {"name": "arg1", "description": "First test argument", "required": True},
            {"name": "arg2", "description": "Second test argument", "required": True},
        ],
        _prompt_with_arguments,
    )
    server.add_prompt(
        "test_prompt_with_embedded_resource", "A prompt that includes an embedded resource",
        [{"name": "resourceUri", "description": "URI of the resource to embed", "required": True}],
        _prompt_with_embedded_resource,
    )
    server.add_prompt("test_prompt_with_image", "A prompt that includes image content", [], _prompt_with_image)

    server.add_prompt(
        INPUT_REQUIRED_PROMPT, "A prompt that first asks the user for its context (SEP-2322)", [], _prompt_with_context
    )

    subs = _Subscriptions()
    low = server.lowlevel
    low.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subs.subscribe)
    low.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, subs.unsubscribe)
    low.add_request_handler("logging/setLevel", types.SetLevelRequestParams, _set_logging_level)
    low.add_request_handler("completion/complete", types.CompleteRequestParams, _complete)
    bus = _EVENT_BUSES.get(server.registry) or InMemorySubscriptionBus()
    low.add_request_handler("subscriptions/listen", types.SubscriptionsListenRequestParams, ListenHandler(bus))
    # Outermost first: the boundary seals what the adapter lifts, and verifies the
    # echoed requestState before any fixture sees it (a tampered token is -32602).
    low.middleware.append(RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=low.name))
    low.middleware.append(_InputRequiredAdapter(server.registry))


__all__ = [
    "ConformanceFixtures",
    "build_conformance_registry",
    "add_conformance_fixtures",
    "conformance_tools",
    "JSON_SCHEMA_2020_12_INPUT",
    "TEST_IMAGE_BASE64",
    "TEST_AUDIO_BASE64",
]
