"""The fixture tools in a registry: :func:`create_conformance_registry` and :class:`ConformanceFixtures`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.subscriptions import PromptsListChanged, ToolsListChanged

from openfunctions.core import ToolExecutionContext, ToolRegistry, ToolResult, define_tool

from ._common import (
    _EVENT_BUSES,
    _FIXTURE,
    _NO_ARGS,
    REQUIRED_CLIENT_CAPABILITIES_META,
)
from ._input_required import (
    MRTR_TAG,
    _ir_capabilities,
    _ir_elicitation,
    _ir_list_roots,
    _ir_multi_round,
    _ir_multiple,
    _ir_request_state,
    _ir_sampling,
    _ir_tampered_state,
    _missing_capability,
)
from ._protocol import add_conformance_fixtures
from ._task_fixtures import (
    _TASK_OPTIONAL,
    _TASK_REQUIRED,
    _confirm_delete,
    _failing_job,
    _multi_input,
    _protocol_error_job,
    _slow_compute,
    _tool_with_task,
)
from ._tools import (
    _CUSTOM_HEADERS_INPUT,
    JSON_SCHEMA_2020_12_INPUT,
    _audio_content,
    _custom_headers,
    _elicitation,
    _elicitation_defaults,
    _elicitation_enums,
    _embedded_resource,
    _error_handling,
    _greet,
    _image_content,
    _json_schema_tool,
    _logging_tool,
    _multiple_content_types,
    _reconnection,
    _sampling,
    _simple_text,
    _with_logging,
    _with_progress,
)


def _list_change_trigger(bus: InMemorySubscriptionBus, event: Any, what: str) -> Any:
    """A diagnostic hook: announce a list change on every ``subscriptions/listen`` stream.

    The fixture lists themselves stay fixed (the suite also checks that
    consecutive ``tools/list`` answers agree); the announcement is what is tested.
    """

    async def trigger(params: dict[str, Any], ctx: ToolExecutionContext) -> ToolResult:
        await bus.publish(event)
        return ToolResult.text(f"{what} list change announced")

    return trigger




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


def create_conformance_registry() -> ConformanceFixtures:
    """The conformance suite's fixture tools in a fresh registry (``.registry``), plus ``.install(server)``."""
    bus = InMemorySubscriptionBus()
    registry = ToolRegistry(conformance_tools(bus))
    _EVENT_BUSES[registry] = bus
    return ConformanceFixtures(registry)
