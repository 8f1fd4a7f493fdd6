"""Resources, prompts and the protocol handlers the suite probes; the 2026-07-28 input-required envelope."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import MISSING_REQUIRED_CLIENT_CAPABILITY
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from openfunctions.core import ToolRegistry

from ._common import (
    _EVENT_BUSES,
    REQUIRED_CLIENT_CAPABILITIES_META,
    TEST_IMAGE_BASE64,
    _image,
    _text,
    log,
)
from ._input_required import INPUT_REQUIRED, MRTR_TAG, _elicit_request

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
    # subscriptions/listen is the server's own (list changes and task status notifications); the
    # list-change triggers publish on the registry's bus, attached so its events ride the same streams.
    bus = _EVENT_BUSES.get(server.registry)
    if bus is not None:
        server.tasks.listen.attach(bus)
    # Outermost first: the boundary seals what the adapter lifts, and verifies the
    # echoed requestState before any fixture sees it (a tampered token is -32602).
    low.middleware.append(RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=low.name))
    low.middleware.append(_InputRequiredAdapter(server.registry))

