"""serve_http: the options it passes to create_http_app, and how it shuts down on signals."""

from __future__ import annotations

import inspect
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from openfunctions.core import ToolRegistry
from openfunctions.servers import MemoryEventStore, create_mcp_server
from openfunctions.servers import _http as http_mod

from .._net import free_port, wait_for_port
from .conftest import server_env, wait_for_file
from .test_http import modern_headers, post, rpc
from .test_http_resume import Session, sse_events


class _Built(Exception):
    pass


@pytest.mark.anyio
async def test_serve_http_hands_create_http_app_every_option_it_takes(monkeypatch):
    """Each of create_http_app's keyword options, given to serve_http, reaches create_http_app unchanged."""
    # ``port`` is serve_http's own (it binds it) and reaches the app as given.
    params = [p for p in inspect.signature(http_mod.create_http_app).parameters.values()
              if p.kind is p.KEYWORD_ONLY and p.name != "port"]
    given = {p.name: object() for p in params}  # a distinct sentinel each: nothing may be swapped or defaulted
    given["event_store"] = MemoryEventStore()
    seen: dict = {}

    def spy(server, **options):
        seen.update(options)
        raise _Built

    monkeypatch.setattr(http_mod, "create_http_app", spy)
    server = create_mcp_server(ToolRegistry([]), name="t", version="0")
    port = free_port()
    with pytest.raises(_Built):
        await http_mod.serve_http(server, port=port, handle_signals=False, **given)
    assert seen == {**given, "port": port}


SERVE_WITHOUT_EVENT_STORE = """
import sys
import anyio
import fixture_tools
from openfunctions.servers import create_mcp_server
from openfunctions.servers._http import serve_http

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


# -- a second shutdown signal forces the exit ----------------------------------


class StderrLines:
    """Collects a subprocess's stderr lines on a thread, so the test can wait for a log line."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for(self, needle: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(needle in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{needle!r} never appeared on stderr: {''.join(self.lines)[-3000:]}")
                self._changed.wait(left)

    def text(self) -> str:
        self._thread.join(timeout=10)
        return "".join(self.lines)


def settled_outcome(data_dir: Path, receipt_id: str) -> str | None:
    from openfunctions.core.journal import read_records

    for f in sorted((data_dir / "journal").glob("*.journal")):
        for rec in read_records(f):
            if rec.type == "receipt" and rec.data.get("receipt_id") == receipt_id:
                return rec.data.get("outcome")
    return None


@pytest.mark.slow
@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=["TERM-TERM", "TERM-INT"])
def test_http_second_signal_during_the_drain_cancels_calls_and_exits_at_once(http_server, tmp_path, second):
    # A drain that would wait a minute for the hanging call: only the forced path ends it inside the safety timeout.
    url, proc = http_server("--stateless", "--shutdown-timeout", "600", "--log-level", "info")
    stderr = StderrLines(proc.stderr)
    markers = tmp_path / "m"
    reply: dict = {}

    def call() -> None:
        try:
            reply["resp"] = post(url, rpc("tools/call", {"name": "slow", "arguments": {"dir": str(markers)}}), name="slow")
        except httpx.HTTPError as exc:  # the connection may be cut by the forced exit
            reply["error"] = exc

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    wait_for_file(markers / "started")
    proc.send_signal(signal.SIGTERM)
    stderr.wait_for("shutdown_signal")  # the drain is under way (and the hanging call still runs)
    proc.send_signal(second)

    assert proc.wait(timeout=60) == 128 + second
    caller.join(timeout=60)
    err = stderr.text()
    assert "shutdown_forced" in err
    assert f"shutdown forced by a second {second.name}: 1 running call(s) cancelled" in err
    assert (markers / "cancelled").exists() and not (markers / "finished").exists()
    # The cancelled call's receipt was settled and journaled before the journal closed.
    assert settled_outcome(tmp_path / "data", (markers / "started").read_text()) == "cancelled"


@pytest.mark.slow
def test_stdio_second_signal_during_the_drain_cancels_calls_and_exits_at_once(raw_stdio, tmp_path):
    markers = tmp_path / "m"
    s = raw_stdio("--shutdown-timeout", "600", "--log-level", "info")
    s.initialize()
    s.start_slow(markers)
    s.proc.send_signal(signal.SIGTERM)
    s.wait_for_stderr(b"shutdown_signal")
    s.proc.send_signal(signal.SIGINT)
    assert s.proc.wait(timeout=60) == 128 + signal.SIGINT
    for t in s._threads:
        t.join(timeout=10)
    assert b"shutdown forced by a second SIGINT: 1 running call(s) cancelled" in bytes(s.stderr)
    assert (markers / "cancelled").exists() and not (markers / "finished").exists()
    assert settled_outcome(tmp_path / "data", (markers / "started").read_text()) == "cancelled"


# -- how the execution journal syncs under HTTP (serve --journal-sync) ---------------------


@pytest.mark.anyio
@pytest.mark.parametrize("journal_sync", ["loop", "thread"])
async def test_journal_sync_chooses_who_writes_the_receipt(tmp_path, journal_sync):
    """``loop`` (the default): the event loop writes and syncs, no writer thread runs; ``thread``: the writer
    thread does. Either way the reply's receipt is the journal's record."""
    import json

    import anyio

    from openfunctions.core.journal import read_records

    from .fixture_tools import registry

    server = create_mcp_server(registry, name="t", version="0", journal_dir=tmp_path / "data")
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    kw = {} if journal_sync == "loop" else {"journal_sync": journal_sync}
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: http_mod.serve_http(server, port=port, handle_signals=False, stateless=True, **kw))
        with anyio.fail_after(60):
            while True:
                try:
                    async with httpx.AsyncClient(timeout=30) as client:
                        replies = [await client.post(url, content=json.dumps(rpc("tools/call", {"name": "add", "arguments": {"a": i, "b": 1}}, rid=i)),
                                                     headers={"Content-Type": "application/json", **modern_headers("tools/call", "add")})
                                   for i in range(3)]
                    break
                except httpx.ConnectError:
                    await anyio.sleep(0.05)
        log = server.journal.log
        writers = [t for t in threading.enumerate() if t.name == f"journal-writer:{log.path.name}"]
        assert log.sync_on_loop is (journal_sync == "loop")
        assert (writers == []) is (journal_sync == "loop")
        path = log.path
        tg.cancel_scope.cancel()
    receipts = {r.data["receipt_id"]: r.data for r in read_records(path) if r.type == "receipt"}
    for resp in replies:
        assert resp.status_code == 200
        receipt = resp.json()["result"]["_meta"]["dev.openfunctions/receipt"]
        assert receipts[receipt["receipt_id"]] == receipt


@pytest.mark.anyio
async def test_an_unknown_journal_sync_is_refused_before_binding():
    from openfunctions.core import ConfigurationError

    server = create_mcp_server(ToolRegistry([]), name="t", version="0")
    with pytest.raises(ConfigurationError, match="journal_sync must be one of loop, thread, not 'fsync'"):
        await http_mod.serve_http(server, port=free_port(), handle_signals=False, journal_sync="fsync")
