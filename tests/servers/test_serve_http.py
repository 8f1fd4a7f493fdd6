"""serve_http: the options it passes to create_http_app, and how it shuts down on signals."""

from __future__ import annotations

import inspect
import signal
import subprocess
import sys

import httpx
import pytest

from openfunctions.core import ToolRegistry
from openfunctions.servers import MemoryEventStore, create_mcp_server
from openfunctions.servers import http as http_mod

from .._net import free_port, wait_for_port
from .conftest import server_env
from .test_http_resume import Session, sse_events


class _Built(Exception):
    pass


@pytest.mark.anyio
async def test_serve_http_hands_create_http_app_every_option_it_takes(monkeypatch):
    """Each of create_http_app's keyword options, given to serve_http, reaches create_http_app unchanged."""
    params = [p for p in inspect.signature(http_mod.create_http_app).parameters.values() if p.kind is p.KEYWORD_ONLY]
    given = {p.name: object() for p in params}  # a distinct sentinel each: nothing may be swapped or defaulted
    given["event_store"] = MemoryEventStore()
    seen: dict = {}

    def spy(server, **options):
        seen.update(options)
        raise _Built

    monkeypatch.setattr(http_mod, "create_http_app", spy)
    server = create_mcp_server(ToolRegistry([]), name="t", version="0")
    with pytest.raises(_Built):
        await http_mod.serve_http(server, port=free_port(), handle_signals=False, **given)
    assert seen == given


SERVE_WITHOUT_EVENT_STORE = """
import sys
import anyio
import fixture_tools
from openfunctions.servers import create_mcp_server
from openfunctions.servers.http import serve_http

server = create_mcp_server(fixture_tools.registry, name="t", version="0")
anyio.run(lambda: serve_http(server, port=int(sys.argv[1]), event_store=False))
"""


@pytest.mark.slow
def test_serve_http_event_store_false_serves_streams_without_event_ids():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE_WITHOUT_EVENT_STORE, str(port)],
        env=server_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for_port(port, proc)
        with httpx.Client(timeout=httpx.Timeout(30.0)) as client:
            session = Session(client, f"http://127.0.0.1:{port}/mcp")
            with session.stream_call(1, "add", {"a": 2, "b": 3}, "tok") as resp:
                assert resp.status_code == 200
                events = list(sse_events(resp))
        assert events and all("id" not in e and "retry" not in e for e in events), events
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.stderr.close()
