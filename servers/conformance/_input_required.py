"""2026-07-28 fixtures: multi-round-trip input (SEP-2322), stateless checks (SEP-2575)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from openfunctions.core import ToolExecutionContext, ToolResult

from ._common import (
    _request_context,
    _text,
)

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

