"""Hostile HTTP: framing, ids, Host/Origin, sessions, slow and idle connections.

Each test talks to a real server subprocess on 127.0.0.1 and speaks raw HTTP where
a well-behaved client library would refuse to send what is tested. Tests that leave the
server as they found it share one per set of flags (``shared_http_server``).
"""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from .conftest import journaled_receipts
from .test_http import ACCEPT, parse_body, post, rpc

pytestmark = pytest.mark.slow

LEGACY_INIT = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}


def _port(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


def _recv_all(sock: socket.socket, deadline: float = 20.0) -> bytes:
    """Read until the server closes the connection (a bound, not a timing assertion)."""
    sock.settimeout(deadline)
    out = bytearray()
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:  # closed with our unread bytes in its buffer: closed all the same
            return bytes(out)
        if not chunk:
            return bytes(out)
        out += chunk


def _hash_call_request(port: int, text: str) -> bytes:
    body = json.dumps(rpc("tools/call", {"name": "of_hash_text", "arguments": {"text": text}})).encode()
    return (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n"
        f"Mcp-Method: tools/call\r\nMcp-Name: of_hash_text\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


PARSERS = pytest.mark.parametrize("parser", ["httptools", "h11"])


@PARSERS
def test_a_request_with_both_framings_is_refused_and_nothing_hidden_behind_it_runs(http_server, tmp_path, parser):
    url, _ = http_server("--stateless", "--http", parser)
    port = _port(url)
    visible = json.dumps(rpc("tools/list")).encode()
    chunked = f"{len(visible):x}\r\n".encode() + visible + b"\r\n0\r\n\r\n"
    smuggled = _hash_call_request(port, "smuggled")
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\n"
        f"Content-Length: {len(chunked)}\r\nTransfer-Encoding: chunked\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(head + chunked + smuggled)
        answer = _recv_all(s)  # returns only because the server closed the connection
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1, answer
    assert b"connection: close" in answer.lower()
    time.sleep(0.5)  # let a (wrongly) running hidden call reach the journal before looking
    assert journaled_receipts(tmp_path / "data") == {}
    # The server itself is fine.
    ok = post(url, rpc("tools/call", {"name": "of_hash_text", "arguments": {"text": "abc"}}), name="of_hash_text")
    assert parse_body(ok)["result"]["structuredContent"]["hex"].startswith("ba7816bf")


def test_requests_with_invalid_ids_get_invalid_request_and_deep_nesting_gets_400(shared_http_server):
    url, _ = shared_http_server("--stateless")
    for bad_id in (None, True, 1.5, {}, [1]):
        body = {**rpc("tools/list"), "id": bad_id}
        resp = post(url, body, method="tools/list")
        assert resp.status_code == 400, (bad_id, resp.status_code, resp.text)
        err = resp.json()
        assert err["id"] is None and err["error"]["code"] == -32600 and '"id"' in err["error"]["message"]
    for depth in (978, 50_000):
        resp = post(url, "[" * depth + "]" * depth, method="tools/list")
        assert resp.status_code == 400 and "Recursion" not in resp.text
    assert parse_body(post(url, rpc("tools/list"), method="tools/list"))["result"]["tools"]


def test_host_and_origin_must_match_exactly(shared_http_server):
    url, _ = shared_http_server("--stateless")
    port = _port(url)

    def status(**headers: str) -> int:
        return post(url, rpc("tools/list"), method="tools/list", headers=headers).status_code

    assert status(Host=f"127.0.0.1:{port}@evil.example") == 421
    assert status(Host=f"127.0.0.1:{port}.evil.example") == 421
    assert status(Host=f"localhost:{port} evil") == 421
    assert status(Host="evil.example") == 421
    assert status(Host=f"localhost:{port}") == 200
    assert status(Host=f"[::1]:{port}") == 200
    assert status(Origin=f"http://localhost:{port}") == 200
    assert status(Origin=f"http://127.0.0.1:{port}") == 200
    assert status(Origin=f"http://localhost:{port + 1 if port < 65535 else port - 1}") == 403
    assert status(Origin=f"http://127.0.0.1:{port}.evil.example") == 403
    assert status(Origin=f"http://127.0.0.1:{port}@evil.example") == 403
    assert status(Origin="null") == 403


def _initialize(url: str) -> httpx.Response:
    return httpx.post(url, json=LEGACY_INIT, headers=ACCEPT, timeout=30)


def test_session_caps_refuse_new_sessions_with_503_and_free_up_on_delete(http_server):
    url, _ = http_server("--max-sessions", "3", "--max-sessions-per-principal", "0")
    opened = [_initialize(url) for _ in range(3)]
    assert [r.status_code for r in opened] == [200, 200, 200]
    refused = _initialize(url)
    assert refused.status_code == 503
    sid = opened[0].headers["mcp-session-id"]
    assert httpx.delete(url, headers={**ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}).status_code in (200, 204)
    assert _initialize(url).status_code == 200


def test_one_client_cannot_take_more_than_its_share_of_sessions(http_server):
    url, _ = http_server("--max-sessions", "10", "--max-sessions-per-principal", "2")
    assert [_initialize(url).status_code for _ in range(2)] == [200, 200]
    refused = _initialize(url)
    assert refused.status_code == 503
    assert "--max-sessions-per-principal" in refused.json()["error"]["message"]


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "sdk-path"])
def test_a_full_per_principal_cap_refuses_only_requests_that_open_a_session(http_server, fast):
    """A 2026-07-28 request opens no session: a full per-principal cap must not answer it 503 (on either path)."""
    url, _ = http_server("--max-sessions", "10", "--max-sessions-per-principal", "1", *([] if fast else ["--no-fast-path"]))
    assert _initialize(url).status_code == 200
    assert _initialize(url).status_code == 503  # the cap is full for this client
    call = post(url, rpc("tools/call", {"name": "of_hash_text", "arguments": {"text": "x"}}), name="of_hash_text")
    assert call.status_code == 200, call.text
    result = parse_body(call)["result"]
    assert result["content"] and not result.get("isError")
    listed = post(url, rpc("tools/list"), method="tools/list")
    assert listed.status_code == 200 and parse_body(listed)["result"]["tools"]
    # a handshake-era request without a session id would open one: still refused
    legacy = httpx.post(url, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
                        headers={**ACCEPT, "mcp-protocol-version": "2025-11-25"}, timeout=30)
    assert legacy.status_code == 503


def test_idle_sessions_expire_and_free_their_slot(http_server):
    url, _ = http_server("--max-sessions", "1", "--session-idle-timeout", "1")
    first = _initialize(url)
    assert first.status_code == 200
    assert _initialize(url).status_code == 503  # the cap holds while the session is alive
    deadline = time.monotonic() + 30
    while (again := _initialize(url)).status_code == 503:
        assert time.monotonic() < deadline, "the idle session never expired"
        time.sleep(0.2)
    assert again.status_code == 200
    gone = httpx.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                      headers={**ACCEPT, "mcp-session-id": first.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"})
    assert gone.status_code == 404


@PARSERS
def test_half_sent_headers_are_timed_out_and_the_connection_cap_holds(http_server, parser):
    url, _ = http_server("--stateless", "--header-timeout", "1", "--max-connections", "20", "--http", parser)
    port = _port(url)
    slow = []
    for _ in range(25):  # 5 more than the cap
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127")
        slow.append(s)
    try:
        # Every connection is closed by the server: past the cap at once with a 503, the others
        # when their head is overdue (the bound is generous; nothing here measures the timeout).
        endings = [_recv_all(s, deadline=30) for s in slow]
        assert all(e == b"" or e.startswith(b"HTTP/1.1 503") for e in endings), endings
        refused = sum(e.startswith(b"HTTP/1.1 503") for e in endings)
        assert refused >= 5 and len(endings) - refused >= 19, endings  # (one slot may still hold the start-up probe)
        # A client that drips one byte at a time is cut off as well.
        with socket.create_connection(("127.0.0.1", port)) as drip:
            drip.settimeout(30)
            closed = False
            for b in b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200:
                try:
                    drip.sendall(bytes([b]))
                except OSError:
                    closed = True
                    break
                time.sleep(0.1)
                drip.setblocking(False)
                try:
                    if drip.recv(1) == b"":
                        closed = True
                        break
                except ConnectionResetError:  # closed with our bytes unread: the kernel answers with a reset
                    closed = True
                    break
                except BlockingIOError:
                    pass
                finally:
                    drip.setblocking(True)
                    drip.settimeout(30)
            assert closed, "a dripping client kept its connection past the header timeout"
    finally:
        for s in slow:
            s.close()
    ok = post(url, rpc("tools/list"), method="tools/list")
    assert ok.status_code == 200


@PARSERS
def test_whitespace_around_a_header_value_is_not_part_of_it(shared_http_server, parser):
    # RFC 9110 5.5 (and the conformance suite's SEP-2243 check): "Mcp-Name:  of_hash_text \t" names
    # of_hash_text. llhttp keeps trailing whitespace where h11 strips it; both parsers must agree.
    url, _ = shared_http_server("--stateless", "--http", parser)
    port = _port(url)
    request = _hash_call_request(port, "abc").replace(b"Mcp-Name: of_hash_text\r\n", b"Mcp-Name:   of_hash_text \t \r\n")
    assert b"Mcp-Name:   of_hash_text \t \r\n" in request
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(request)
        head, _, body = _recv_response(s).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head + body[:300]
    assert json.loads(body)["result"]["structuredContent"]["hex"].startswith("ba7816bf")


def _recv_response(sock: socket.socket, deadline: float = 20.0) -> bytes:
    """One Content-Length response (a bound, not a timing assertion)."""
    sock.settimeout(deadline)
    out = bytearray()
    while b"\r\n\r\n" not in out:
        out += sock.recv(65536) or b""
    head, _, body = bytes(out).partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@PARSERS
def test_an_oversized_request_head_is_refused_and_its_connection_closed(shared_http_server, parser):
    # h11 bounds a head itself (uvicorn answers 400); llhttp does not, so our httptools protocol
    # counts head bytes and answers 431. Either way the connection is closed, however the head arrives.
    url, _ = shared_http_server("--stateless", "--http", parser)
    port = _port(url)
    expected = b"HTTP/1.1 431" if parser == "httptools" else b"HTTP/1.1 400"
    head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Big: ".encode()
    with socket.create_connection(("127.0.0.1", port)) as s:  # one header that never ends, in 1 KiB pieces
        s.sendall(head)
        try:
            for _ in range(64):
                s.sendall(b"a" * 1024)
        except OSError:
            pass  # closed under us: what is tested
        answer = _recv_all(s)
    assert answer.startswith(expected), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1 and b"connection: close" in answer.lower()
    many = "".join(f"X-H{i}: {'v' * 60}\r\n" for i in range(400)).encode()  # many small headers, ~27 KB
    with socket.create_connection(("127.0.0.1", port)) as s:
        try:
            s.sendall(head.replace(b"X-Big: ", many) + b"Content-Length: 0\r\n\r\n")
        except OSError:
            pass
        answer = _recv_all(s)
    assert answer.startswith(expected), answer[:200]
    # A large body (not head) is fine, and the server serves on.
    ok = post(url, rpc("tools/call", {"name": "of_hash_text", "arguments": {"text": "x" * 200_000}}), name="of_hash_text")
    assert parse_body(ok)["result"]["structuredContent"]["bytes"] == 200_000


def test_a_body_that_never_finishes_gets_408(http_server):
    url, _ = http_server("--stateless", "--body-timeout", "1")
    port = _port(url)
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(
            f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: {ACCEPT['Accept']}\r\nContent-Length: 1000\r\n\r\n{{\"jsonrpc\":".encode()
        )
        answer = _recv_all(s, deadline=30)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]


def test_healthz_answers_ok(shared_http_server):
    url, _ = shared_http_server("--stateless")
    resp = httpx.get(url.rsplit("/", 1)[0] + "/healthz")
    assert resp.status_code == 200 and resp.json() == {"status": "ok", "journal": {"status": "ok"}}


def test_invalid_ids_in_a_session_get_invalid_request_not_202(http_server):
    url, _ = http_server()
    sid = _initialize(url).headers["mcp-session-id"]
    headers = {**ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}
    for bad_id in (None, True, 1.5, {}, [1]):
        resp = httpx.post(url, json={"jsonrpc": "2.0", "id": bad_id, "method": "tools/list"}, headers=headers)
        assert resp.status_code == 400, (bad_id, resp.status_code, resp.text)
        assert resp.json()["error"]["code"] == -32600
    ok = httpx.post(url, json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"}, headers=headers, timeout=30)
    assert parse_body(ok)["result"]["tools"]
