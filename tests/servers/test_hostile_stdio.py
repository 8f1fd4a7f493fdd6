"""Hostile single lines over stdio: each gets its answer and the server keeps serving.

One server per test, several hostile lines each (a server start costs seconds).
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def _still_serves(s) -> None:
    out = s.call("tools/call", {"name": "of_hash_text", "arguments": {"text": "abc"}})
    assert out["result"]["structuredContent"]["hex"].startswith("ba7816bf")
    assert s.proc.poll() is None


def test_cancelled_with_an_unhashable_or_odd_request_id_does_not_kill_the_server(raw_stdio):
    s = raw_stdio()
    s.initialize()
    for request_id in ({"a": 1}, [1, 2], [], {}, None, 1.5, True):
        s.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}})
        _still_serves(s)


def test_deeply_nested_lines_get_an_error_and_the_server_keeps_serving(raw_stdio):
    s = raw_stdio()
    s.initialize()
    for depth in (978, 5000, 100_000):
        for opener, closer in (("[", "]"), ('{"a":', "}")):
            s.send_raw((opener * depth + "1" + closer * depth).encode() + b"\n")
            reply = s.read()
            assert reply["jsonrpc"] == "2.0" and reply["id"] is None, reply
            assert reply["error"]["code"] == -32600
            assert "nest" in reply["error"]["message"]
            assert "RecursionError" not in json.dumps(reply)
            _still_serves(s)


def test_deeply_nested_params_inside_a_request_get_an_error_with_its_id(raw_stdio):
    s = raw_stdio()
    s.initialize()
    deep = "[" * 500 + "]" * 500  # deeper than the adapter takes, shallow enough for Python to find the id
    line = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"of_json_query","arguments":{"document":' + deep + "}}}"
    s.send_raw(line.encode() + b"\n")
    reply = s.read()
    assert reply["id"] == 7 and reply["error"]["code"] == -32600, reply
    assert "nest" in reply["error"]["message"]
    _still_serves(s)


def test_a_request_with_an_invalid_id_gets_invalid_request_not_silence(raw_stdio):
    s = raw_stdio()
    s.initialize()
    for bad_id in (None, True, False, 1.5, {}, [1], {"x": 1}):
        s.send({"jsonrpc": "2.0", "id": bad_id, "method": "tools/list"})
        reply = s.read(timeout=10)
        assert reply["id"] is None and reply["error"]["code"] == -32600, (bad_id, reply)
        assert '"id"' in reply["error"]["message"]
        _still_serves(s)


def test_a_notification_without_id_still_gets_no_reply(raw_stdio):
    s = raw_stdio()
    s.initialize()
    s.send({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"})
    # The next line on stdout must answer this request, not the notification.
    rid = s.request("tools/list")
    assert s.read()["id"] == rid
