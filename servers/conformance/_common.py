"""What every conformance fixture module shares: test payloads, the fixture capability, request helpers."""

from __future__ import annotations

import weakref
from typing import Any

import structlog
from mcp.server.subscriptions import InMemorySubscriptionBus

from openfunctions.core import ToolExecutionContext, ToolRegistry

log = structlog.get_logger("openfunctions.servers.conformance")

# A 1x1 PNG and a minimal WAV header: the suite only checks type, data and mimeType.
TEST_IMAGE_BASE64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
TEST_AUDIO_BASE64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

# The fixtures have no effects: they share the read pool, so a tool waiting on
# the client (sampling, elicitation) never blocks another scenario's call.
_FIXTURE = {"effect": "read", "parallel_safe": True, "idempotent": True}
_NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}


def _request_context(ctx: ToolExecutionContext) -> Any:
    return ctx.request


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


REQUIRED_CLIENT_CAPABILITIES_META = "dev.openfunctions/requiredClientCapabilities"

# The event bus each conformance registry's trigger tools publish on; the server
# side (subscriptions/listen) is attached by add_conformance_fixtures.
_EVENT_BUSES: weakref.WeakKeyDictionary[ToolRegistry, InMemorySubscriptionBus] = weakref.WeakKeyDictionary()
