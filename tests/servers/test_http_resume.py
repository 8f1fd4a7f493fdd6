"""Resumable SSE streams over streamable HTTP (SEP-1699), and the event store behind them.

The end-to-end tests drive a real ``serve --transport http`` subprocess with
httpx: read a tool call's SSE stream, drop the connection, reconnect with
``Last-Event-ID`` and receive what was missed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from openfunctions.servers import MemoryEventStore
from openfunctions.servers._http import create_http_app

from .conftest import wait_for_file

VERSION = "2025-11-25"  # resumability (priming events) starts with this protocol version
SSE_ACCEPT = "application/json, text/event-stream"


# -- a minimal SSE client ----------------------------------------------------


def sse_events(resp: httpx.Response) -> Iterator[dict]:
    """Parsed SSE events of a streaming response: dicts with ``id``, ``data``, ``retry`` (when present)."""
    event: dict = {}
    data: list[str] = []
    for line in resp.iter_lines():
        if line == "":
            if event or data:
                event["data"] = "\n".join(data)
                yield event
            event, data = {}, []
            continue
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            data.append(value)
        elif field in ("id", "retry", "event"):
            event[field] = value


def seq(event_id: str) -> int:
    return int(event_id.rpartition("_")[2])


class Session:
    """One MCP session over raw HTTP (protocol 2025-11-25)."""

    def __init__(self, client: httpx.Client, url: str) -> None:
        self.client, self.url = client, url
        resp = client.post(
            url,
            json={
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "resume-test", "version": "0"}},
            },
            headers={"Accept": SSE_ACCEPT},
        )
        assert resp.status_code == 200, resp.text
        self.id = resp.headers["mcp-session-id"]
        note = client.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers())
        assert note.status_code == 202, note.text

    def headers(self, **extra: str) -> dict[str, str]:
        return {"Accept": SSE_ACCEPT, "mcp-session-id": self.id, "mcp-protocol-version": VERSION, **extra}

    def stream_call(self, rid: int, name: str, arguments: dict, progress_token: str):
        body = {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": {"progressToken": progress_token}},
        }
        return self.client.stream("POST", self.url, json=body, headers=self.headers())

    def resume(self, last_event_id: str):
        return self.client.stream(
            "GET", self.url, headers=self.headers(**{"Accept": "text/event-stream", "Last-Event-ID": last_event_id})
        )


# -- end to end --------------------------------------------------------------


@pytest.mark.slow
def test_dropped_stream_resumes_with_last_event_id(http_server, tmp_path):
    url, _proc = http_server("--sse-retry-ms", "250")
    work = tmp_path / "slow"
    with httpx.Client(timeout=httpx.Timeout(30.0)) as client:
        session = Session(client, url)

        # Read the call's stream up to its first progress notification, then drop the connection.
        with session.stream_call(7, "slow", {"dir": str(work)}, "tok-7") as resp:
            assert resp.status_code == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            events = sse_events(resp)
            priming = next(events)
            progress = next(events)
        assert priming["data"] == "" and priming["id"] and priming["retry"] == "250"
        first_progress = json.loads(progress["data"])
        assert first_progress["method"] == "notifications/progress"
        assert first_progress["params"]["progressToken"] == "tok-7"
        assert seq(progress["id"]) > seq(priming["id"])

        wait_for_file(work / "started")
        # The tool finishes while nobody listens: its result is only in the event store (or arrives live).
        (work / "release").write_text("go")

        # Resume from the priming event: everything after it on that stream comes back,
        # the progress notification already seen (same id) and the result never seen.
        replayed: list[dict] = []
        with session.resume(priming["id"]) as resp:
            assert resp.status_code == 200, resp.read()
            for event in sse_events(resp):
                if event["data"] == "":
                    continue  # the resumed stream's own priming event
                message = json.loads(event["data"])
                replayed.append({"id": event["id"], "message": message})
                if message.get("id") == 7:
                    break

    assert replayed[0] == {"id": progress["id"], "message": first_progress}
    result = replayed[-1]["message"]
    assert result["result"]["structuredContent"] == {"finished": True}
    ids = [seq(e["id"]) for e in replayed]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert (work / "finished").exists() and not (work / "cancelled").exists()


@pytest.mark.slow
def test_another_sessions_event_id_replays_nothing(http_server, tmp_path):
    url, _proc = http_server()
    with httpx.Client(timeout=httpx.Timeout(30.0)) as client:
        alice = Session(client, url)
        with alice.stream_call(1, "add", {"a": 2, "b": 3}, "tok-a") as resp:
            events = list(sse_events(resp))
        ids = [e["id"] for e in events]
        assert json.loads(events[-1]["data"])["result"]["structuredContent"] == {"sum": 5}

        # Alice herself can replay her own stream from its priming event...
        with alice.resume(ids[0]) as resp:
            for event in sse_events(resp):
                if event["data"] and json.loads(event["data"]).get("id") == 1:
                    break  # the replayed result; the stream itself stays open for live events
            else:
                pytest.fail("alice's replay ended without her result")

        # ...but Bob, using the same request id 1 in his own session, gets none of it.
        bob = Session(client, url)
        with bob.stream_call(1, "add", {"a": 1, "b": 1}, "tok-b") as resp:
            list(sse_events(resp))
        with bob.resume(ids[0]) as resp:
            assert resp.status_code == 200
            leaked = [e for e in sse_events(resp) if e["data"]]
    assert leaked == []


@pytest.mark.slow
def test_stateless_streams_carry_no_event_ids(http_server):
    url, _proc = http_server("--stateless")
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1, "b": 2}, "_meta": meta}}
    headers = {"Accept": SSE_ACCEPT, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "add"}
    with httpx.Client(timeout=30) as client, client.stream("POST", url, json=body, headers=headers) as resp:
        assert resp.status_code == 200
        if resp.headers["content-type"].startswith("text/event-stream"):
            events = list(sse_events(resp))
        else:
            events = [{"data": resp.read().decode()}]
    assert json.loads(events[-1]["data"])["result"]["structuredContent"] == {"sum": 3}
    assert all("id" not in e and "retry" not in e for e in events)


def test_create_http_app_rejects_a_negative_retry_interval():
    from openfunctions.core import ToolRegistry
    from openfunctions.servers import create_mcp_server

    server = create_mcp_server(ToolRegistry([]), name="t", version="0")
    with pytest.raises(ValueError, match="retry_interval"):
        create_http_app(server, retry_interval=-1)


# -- the store itself ----------------------------------------------------------


def note(n: int):
    from mcp_types import JSONRPCNotification

    return JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"n": n})


async def collect(view, last_id):
    got: list = []

    async def send(event):
        got.append((event.event_id, event.message.params["n"]))

    stream = await view.replay_events_after(last_id, send)
    return stream, got


@pytest.mark.anyio
async def test_store_replays_after_an_id_within_its_own_stream_and_session():
    store = MemoryEventStore()
    a, b = store.for_session("A"), store.for_session("B")
    prime = await a.store_event("1", None)
    ids = [await a.store_event("1", note(i)) for i in range(3)]
    await a.store_event("2", note(99))  # another stream of the same session
    await b.store_event("1", note(-1))  # same stream name, other session
    assert [seq(i) for i in [prime, *ids]] == sorted(seq(i) for i in [prime, *ids])

    assert await collect(a, prime) == ("1", [(ids[0], 0), (ids[1], 1), (ids[2], 2)])
    assert await collect(a, ids[1]) == ("1", [(ids[2], 2)])
    assert await collect(b, ids[0]) == (None, [])  # A's id means nothing to B
    assert await collect(a, "not-an-id") == (None, [])
    assert await collect(a, "deadbeef_1") == (None, [])  # an id from another store (a restarted server)


@pytest.mark.anyio
async def test_store_bounds_evict_the_oldest():
    per_stream = MemoryEventStore(max_events_per_stream=2)
    s = per_stream.for_session("S")
    ids = [await s.store_event("1", note(i)) for i in range(4)]
    await s.store_event("2", note(9))
    assert per_stream.event_count == 3
    assert await collect(s, ids[0]) == (None, [])  # evicted: cannot resume from it
    assert await collect(s, ids[2]) == ("1", [(ids[3], 3)])

    total = MemoryEventStore(max_events=3)
    a, b = total.for_session("A"), total.for_session("B")
    old = await a.store_event("1", note(0))
    keep = await a.store_event("1", note(1))
    await b.store_event("1", note(2))
    await b.store_event("1", note(3))
    assert total.event_count == 3
    assert await collect(a, old) == (None, [])
    assert await collect(a, keep) == ("1", [])

    size = len(note(0).model_dump_json(by_alias=True, exclude_unset=True))
    by_bytes = MemoryEventStore(max_bytes=2 * size)
    c = by_bytes.for_session("C")
    first = await c.store_event("1", note(0))
    second = await c.store_event("1", note(1))
    await c.store_event("1", note(2))
    assert by_bytes.event_count == 2 and by_bytes.byte_count == 2 * size
    assert await collect(c, first) == (None, [])
    assert (await collect(c, second))[1] == [(f"{second.rpartition('_')[0]}_{seq(second) + 1}", 2)]


@pytest.mark.anyio
async def test_drop_session_forgets_only_that_session():
    store = MemoryEventStore()
    a, b = store.for_session("A"), store.for_session("B")
    a_id = await a.store_event("1", note(0))
    await a.store_event("_GET_stream", note(1))
    b_id = await b.store_event("1", note(2))
    await b.store_event("1", note(3))
    store.drop_session("A")
    assert store.event_count == 2
    assert await collect(a, a_id) == (None, [])
    assert (await collect(b, b_id))[1] == [(f"{b_id.rpartition('_')[0]}_{seq(b_id) + 1}", 3)]


def test_store_rejects_nonsense_bounds():
    with pytest.raises(ValueError, match="max_events_per_stream"):
        MemoryEventStore(max_events_per_stream=0)
    with pytest.raises(ValueError, match="max_bytes"):
        MemoryEventStore(max_bytes=-1)


@pytest.mark.anyio
async def test_each_session_gets_its_own_view_and_its_events_go_with_it():
    """Guards the SDK hook create_http_app relies on (StreamableHTTPSessionManager._admit_session)."""
    import gc

    from openfunctions.core import ToolRegistry
    from openfunctions.servers import create_mcp_server

    server = create_mcp_server(ToolRegistry([]), name="t", version="0")
    store = MemoryEventStore()
    create_http_app(server, event_store=store)
    manager = server.lowlevel.session_manager
    one, two = manager._admit_session(None), manager._admit_session(None)
    await one._event_store.store_event("1", note(1))
    await two._event_store.store_event("1", note(2))
    assert store.event_count == 2 and one.mcp_session_id != two.mcp_session_id

    manager._server_instances.pop(one.mcp_session_id)
    del one
    gc.collect()
    assert store.event_count == 1  # the ended session's events are gone, the other's stay
