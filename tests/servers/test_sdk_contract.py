"""The MCP SDK's private parts the servers use (servers/_sdk.py) still exist with the shape we rely on.

Each check names the SDK attribute in its failure message: an SDK release that moves one fails here first,
before a server starts without a session cap, resumability or list_changed notifications.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.server.connection import Connection
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from openfunctions.core import ToolRegistry
from openfunctions.servers import _sdk, create_mcp_server
from openfunctions.servers._sdk import SdkContractError

from . import fixture_tools

ROOT = Path(__file__).resolve().parents[2]


def _server():
    return create_mcp_server(ToolRegistry(fixture_tools.tools), name="contract", version="0")


def test_the_installed_sdk_is_the_minor_release_pyproject_pins_and_sdk_py_names():
    from importlib.metadata import version

    installed = version("mcp")
    assert ".".join(installed.split(".")[:2]) == _sdk.SDK_TESTED, (
        f"mcp {installed} is installed; servers/_sdk.py was checked against {_sdk.SDK_TESTED}.x")
    pin = re.search(r'"mcp>=([0-9.]+),<([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert pin is not None, "pyproject.toml pins mcp as \"mcp>=X.Y,<X.Z\""
    major, minor = (int(x) for x in _sdk.SDK_TESTED.split("."))
    assert pin.groups() == (_sdk.SDK_TESTED, f"{major}.{minor + 1}")


def test_session_manager_admit_and_discard_session_have_the_shape_we_wrap():
    admit = getattr(StreamableHTTPSessionManager, "_admit_session", None)
    discard = getattr(StreamableHTTPSessionManager, "_discard_session", None)
    assert callable(admit), "StreamableHTTPSessionManager._admit_session is gone (servers/_sdk.py wrap_session_admission)"
    assert callable(discard), "StreamableHTTPSessionManager._discard_session is gone (servers/_sdk.py wrap_session_admission)"
    assert list(inspect.signature(admit).parameters) == ["self", "requestor"], \
        "StreamableHTTPSessionManager._admit_session(requestor) changed its parameters"
    assert inspect.iscoroutinefunction(discard), "StreamableHTTPSessionManager._discard_session is no longer async"
    assert list(inspect.signature(discard).parameters) == ["self", "session_id", "transport"], \
        "StreamableHTTPSessionManager._discard_session(session_id, transport) changed its parameters"


@pytest.mark.anyio
async def test_a_running_manager_exposes_its_task_group_and_lifespan_state_and_admits_through_our_wrappers():
    state = {"marker": object()}

    @contextlib.asynccontextmanager
    async def lifespan(_: Any):
        yield state

    manager = StreamableHTTPSessionManager(Server("contract", lifespan=lifespan))
    assert _sdk.manager_internals_present(manager), \
        "StreamableHTTPSessionManager._lifespan_state/_task_group are gone (servers/_sdk.py; the fast path turns off)"
    seen: list[str] = []

    def admit(original):
        def wrapped(requestor):
            transport = original(requestor)
            seen.append("admit")
            return transport
        return wrapped

    def discard(original):
        async def wrapped(session_id, transport):
            seen.append("discard")
            await original(session_id, transport)
        return wrapped

    _sdk.wrap_session_admission(manager, admit, discard)
    assert _sdk.manager_task_group(manager) is None  # not running yet: the fast path passes
    async with manager.run():
        assert _sdk.manager_task_group(manager) is not None, "StreamableHTTPSessionManager._task_group is not set by run()"
        assert _sdk.manager_lifespan_state(manager) is state, \
            "StreamableHTTPSessionManager._lifespan_state is not the lifespan's state"
        transport = manager._admit_session(None)
        assert isinstance(transport, StreamableHTTPServerTransport) and transport.mcp_session_id
        assert manager._server_instances[transport.mcp_session_id] is transport
        # The per-session event store replaces what the SDK handed the transport.
        assert hasattr(transport, "_event_store"), "StreamableHTTPServerTransport._event_store is gone (servers/_sdk.py)"
        mine = object()
        _sdk.set_session_event_store(transport, mine)
        assert transport._event_store is mine
        await manager._discard_session(transport.mcp_session_id, transport)
        assert transport.mcp_session_id not in manager._server_instances
    assert seen == ["admit", "discard"]
    assert _sdk.manager_task_group(manager) is None and _sdk.manager_lifespan_state(manager) is None


def test_the_transport_keeps_the_event_store_it_was_given_in_event_store():
    store = object()
    transport = StreamableHTTPServerTransport(mcp_session_id="s", event_store=store)  # type: ignore[arg-type]
    assert getattr(transport, "_event_store", None) is store, \
        "StreamableHTTPServerTransport no longer keeps its store in _event_store (servers/_sdk.py set_session_event_store)"


def test_a_server_session_keeps_its_connection_in_connection():
    assert "connection" in inspect.signature(ServerSession.__init__).parameters, \
        "ServerSession(connection=...) changed (servers/_sdk.py connection_of)"
    connection = Connection(None, protocol_version="2025-11-25")  # type: ignore[arg-type]
    session = ServerSession(object(), connection)  # type: ignore[arg-type]
    assert _sdk.connection_of(session, Connection) is connection, \
        "ServerSession._connection is gone (servers/_sdk.py connection_of: no list_changed to handshake-era clients)"


@pytest.mark.anyio
async def test_a_handshake_client_that_listed_tools_is_remembered_by_its_connection_and_told_list_changed():
    # Both halves of what the private reads buy, through the SDK's own runner: the handshake advertises
    # listChanged (create_initialization_options patched per instance) and the listing connection is remembered.
    server = _server()
    async with Client(server.lowlevel, mode="legacy") as client:
        caps = client.server_capabilities
        assert caps.tools is not None and caps.tools.list_changed is True, \
            "the SDK's runner no longer calls server.create_initialization_options() (servers/_sdk.py announce_list_changes)"
        await client.list_tools()
        assert any(isinstance(c, Connection) for c in server._listing_connections)


def test_a_connection_s_exit_stack_is_an_async_exit_stack_with_exit_callbacks():
    stack = Connection(None, protocol_version="2026-07-28").exit_stack  # type: ignore[arg-type]
    assert isinstance(stack, contextlib.AsyncExitStack), "Connection.exit_stack is no longer an AsyncExitStack"
    assert hasattr(stack, "_exit_callbacks"), "AsyncExitStack._exit_callbacks is gone (servers/_sdk.py exit_stack_in_use)"
    assert _sdk.exit_stack_in_use(stack) is False

    async def nothing() -> None:
        pass

    stack.push_async_callback(nothing)
    assert _sdk.exit_stack_in_use(stack) is True


def test_the_sdk_s_otel_middleware_type_is_found_and_in_a_new_server_s_chain():
    assert _sdk.OTEL_MIDDLEWARE is not None, "mcp.server._otel.OpenTelemetryMiddleware is gone (servers/_sdk.py)"
    assert any(isinstance(mw, _sdk.OTEL_MIDDLEWARE) for mw in _server().lowlevel.middleware), \
        "a new low-level Server no longer installs mcp.server._otel.OpenTelemetryMiddleware"


# -- when a part is missing: a clear error or a safe fallback, never an AttributeError/ImportError ------------------


def test_missing_session_admission_is_a_clear_error_naming_the_attribute():
    with pytest.raises(SdkContractError) as ei:
        _sdk.wrap_session_admission(object(), lambda f: f, lambda f: f)
    assert ei.value.code == "sdk_contract_broken" and "_admit_session" in str(ei.value)
    assert ei.value.details["sdk_attribute"] == "StreamableHTTPSessionManager._admit_session"

    class OnlyAdmit:
        def _admit_session(self, requestor):
            return None

    with pytest.raises(SdkContractError, match="_discard_session"):
        _sdk.wrap_session_admission(OnlyAdmit(), lambda f: f, lambda f: f)
    with pytest.raises(SdkContractError, match="_event_store"):
        _sdk.set_session_event_store(object(), object())


def test_missing_manager_internals_turn_the_fast_path_off_and_unknown_stacks_are_unwound():
    assert _sdk.manager_internals_present(object()) is False
    assert _sdk.manager_task_group(object()) is None and _sdk.manager_lifespan_state(object()) is None
    assert _sdk.exit_stack_in_use(object()) is True  # type: ignore[arg-type]  # cannot tell: always unwind


def test_a_session_without_connection_falls_back_to_the_session_itself():
    from openfunctions.servers._server import _connection_of

    session = object()
    assert _sdk.connection_of(session, Connection) is None
    assert _connection_of(session) is session


def test_a_changed_create_initialization_options_is_refused_at_startup():
    class Lowlevel:
        def create_initialization_options(self, options=None):
            return options

    with pytest.raises(SdkContractError, match="create_initialization_options"):
        _sdk.announce_list_changes(Lowlevel(), "default")


def test_an_sdk_without_the_otel_module_leaves_the_middleware_in_the_fast_path_s_chain(monkeypatch):
    import openfunctions.servers._fast as fast_module
    from openfunctions.servers._fast import FastCalls

    monkeypatch.setitem(sys.modules, "mcp.server._otel", None)  # the import now fails, as if the SDK moved it
    assert _sdk._load_otel_middleware() is None
    monkeypatch.setattr(fast_module, "OTEL_MIDDLEWARE", None)
    server = _server()
    calls = FastCalls.of(server)
    calls._chain()
    assert calls._composed is not None and calls._composed[0] == calls._server_middleware()
