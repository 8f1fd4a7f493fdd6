"""A seeded hostile corpus against the chat server's HTTP surface (``chat --serve``), over raw sockets.

``OPENFUNCTIONS_CHAT_FUZZ_REQUESTS`` (default 600) requests, ``OPENFUNCTIONS_FUZZ_SEED`` picks the sequence
(default 19). Each request is a random mix of method, path, Host, Origin, Content-Type, framing, conversation
id and body (valid turns, broken JSON, invalid UTF-8, 30,000-deep nesting, oversized, non-objects, wrong
types), sent by hand on its own connection (so httpx's own checks do not filter it), some cut off mid-body.
Asserted: every answered request gets a well-formed HTTP response with no 5xx (the model never fails here),
every JSON error body is ``{"error": {"code", "message"}}`` with no traceback in it, the server never logs a
traceback and logs refusals rate-limited (well under one line per request), and afterwards ``/health`` answers and a normal turn
works. Seconds, not minutes: the server is one subprocess, the requests go four at a time.
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .._net import read_until_closed
from ..servers.conftest import HERE as SERVERS
from ..servers.conftest import server_env

pytestmark = pytest.mark.slow  # subprocess servers
COUNT = int(os.environ.get("OPENFUNCTIONS_CHAT_FUZZ_REQUESTS", "600"))
SEED = int(os.environ.get("OPENFUNCTIONS_FUZZ_SEED", "19"))
BOUND = 30.0  # seconds one request may take before it counts as a hang (a bound, not a timing claim)

_METHODS = ["POST"] * 6 + ["GET", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "BREW"]
_PATHS = ["/chat"] * 4 + ["/chat/stream"] * 2 + ["/reset", "/health", "/", "/nope", "/chat/", "//chat", "/chat?x=1",
                                                  "/" + "a" * 3000, "/%00", "/chat/../reset"]
_TYPES = ["application/json"] * 6 + [None, "text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                                     "multipart/form-data; boundary=x", "application/json; charset=utf-8",
                                     "application/problem+json", "APPLICATION/JSON", "application/jsonx", "json", ""]


def _origins(port: int) -> list[str | None]:
    return [None] * 5 + [f"http://127.0.0.1:{port}", f"http://localhost:{port}", "null", "http://evil.example",
                         "http://127.0.0.1:3000", f"http://127.0.0.1:{port}@evil.example", "file://", " ", "http://[::1]"]


def _hosts(port: int) -> list[str | None]:
    return [f"127.0.0.1:{port}"] * 6 + [None, "evil.example", f"localhost:{port + 1}", "127.0.0.1", "[::1]:1",
                                        f"127.0.0.1:{port}.evil.example", "", "a" * 300, "127.0.0.1:99999"]


def _json_body(rng: random.Random) -> bytes:
    kind = rng.randrange(14)
    if kind < 4:
        return json.dumps({"message": rng.choice(["hi", "add 2 and 3", "é漢🙂", "x" * 500])}).encode()
    if kind == 4:
        return b'{"message": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
    if kind == 5:
        depth = rng.choice([150, 200, 201, 900])
        return b"[" * depth + b"]" * depth
    if kind == 6:
        return b'{"message": "' + b"y" * rng.choice([70_000, 200_000]) + b'"}'
    if kind == 7:
        return rng.choice([b"", b"{", b"null", b"[]", b'"message"', b"1e999999", b"NaN", b"\xef\xbb\xbf{}", b"\xff\xfe\x00"])
    if kind == 8:
        return json.dumps({"message": rng.choice([None, 5, [], {}, True, "", "   ", "x" * 9000])}).encode()
    if kind == 9:
        cid = rng.choice([5, "", "conv_" + "A" * 32, "../../etc/passwd", "conv_" + "x" * 5000, None, ["conv_"]])
        return json.dumps({"message": "hi", "conversation_id": cid}).encode()
    if kind == 10:
        return b'{"message": "a", "message": "b"}'
    if kind == 11:
        return b'{"message": "\\ud800"}'
    if kind == 12:
        return bytes(rng.randrange(256) for _ in range(rng.choice([1, 50, 2000])))
    return b'{"message": "hi", ' + b'"k": 1, ' * 2000 + b'"z": 0}'


def _request(rng: random.Random, port: int) -> tuple[bytes, bool]:
    """(raw request, cut off mid-body?)."""
    method, path = rng.choice(_METHODS), rng.choice(_PATHS)
    host, origin, ctype = rng.choice(_hosts(port)), rng.choice(_origins(port)), rng.choice(_TYPES)
    body = _json_body(rng) if method in ("POST", "PUT", "PATCH") or rng.random() < 0.1 else b""
    headers = []
    if host is not None:
        headers.append(f"Host: {host}")
    if origin is not None:
        headers.append(f"Origin: {origin}")
    if ctype is not None:
        headers.append(f"Content-Type: {ctype}")
    if rng.random() < 0.15:
        headers.append("X-Conversation-Id: " + rng.choice(["conv_" + "B" * 32, "nope", "conv_" + "é" * 3, "x" * 8000]))
    if rng.random() < 0.05:
        headers.append("Authorization: Bearer nothing")
    cut = bool(body) and rng.random() < 0.08
    framing = rng.random()
    if framing < 0.8:
        headers.append(f"Content-Length: {len(body)}")
        payload = body
    elif framing < 0.9:
        headers.append("Transfer-Encoding: chunked")
        payload = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body) if body else b"0\r\n\r\n"
    else:
        headers += [f"Content-Length: {len(body)}", "Transfer-Encoding: chunked"]
        payload = body
    headers.append("Connection: close")
    raw = (f"{method} {path} HTTP/1.1\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode("utf-8") + payload
    if cut:
        raw = raw[: len(raw) - max(1, len(payload) // 2)]
    return raw, cut


def _fixed(port: int) -> list[tuple[bytes, bool]]:
    """One request per answer the corpus must have produced whatever the random seed (200, 400, 403, 413, 415, 421)."""

    def post(body: bytes, host: str = f"127.0.0.1:{port}", extra: str = "content-type: application/json\r\n") -> bytes:
        return (f"POST /chat HTTP/1.1\r\nHost: {host}\r\n{extra}Content-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n").encode() + body

    hi = b'{"message": "hi"}'
    return [(raw, False) for raw in (
        post(hi), post(b"[" * 300 + b"]" * 300), post(hi, extra="content-type: application/json\r\norigin: null\r\n"),
        post(b'{"message": "' + b"y" * 70_000 + b'"}'), post(hi, extra="content-type: text/plain\r\n"),
        post(hi, host="evil.example"),
    )]


def _send(port: int, raw: bytes, cut: bool) -> bytes | None:
    with socket.create_connection(("127.0.0.1", port), timeout=BOUND) as s:
        try:
            s.sendall(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused early (the guard closed the connection): what came back is still read below
        if cut:
            return None  # leave mid-body
        return read_until_closed(s)


def _check(raw: bytes, reply: bytes) -> str | None:
    """What is wrong with ``reply`` to ``raw``, or None."""
    if not reply:
        return None  # closed without an answer: a head the server refused at the parser, or a cut-off client
    m = re.match(rb"HTTP/1\.1 (\d{3}) ", reply)
    if m is None:
        return f"not an HTTP response: {reply[:80]!r}"
    status = int(m.group(1))
    head, _, body = reply.partition(b"\r\n\r\n")
    if status >= 500 and status != 503:
        return f"{status} for {raw[:120]!r}: {body[:200]!r}"
    if b"Traceback" in body or b"RecursionError" in body:
        return f"a traceback in the body: {body[:200]!r}"
    if status >= 400 and b"application/json" in head.lower() and not raw.startswith(b"HEAD"):
        try:
            err = json.loads(body)["error"]
            assert isinstance(err["code"], str) and isinstance(err["message"], str)
        except Exception:  # noqa: BLE001 - any shape problem is the finding
            return f"{status} with a body that is not {{'error': {{code, message}}}}: {body[:200]!r}"
    return None


def test_a_hostile_corpus_gets_4xx_never_5xx_and_never_a_traceback(tmp_path: Path) -> None:
    log, out = tmp_path / "chat.log", tmp_path / "chat.out"
    with log.open("wb") as err, out.open("wb") as stdout:
        proc = subprocess.Popen([sys.executable, str(SERVERS / "guard_chat_server.py"), str(tmp_path / "data"),
                                 json.dumps({"body_timeout": 2.0, "header_timeout": 2.0})],
                                env=server_env(), stdout=stdout, stderr=err)
    try:
        deadline = time.monotonic() + BOUND
        while not (m := re.search(r"port (\d+)", out.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.05)
        port = int(m.group(1))
        rng = random.Random(SEED)
        corpus = _fixed(port) + [_request(rng, port) for _ in range(COUNT)]
        with ThreadPoolExecutor(4) as pool:
            replies = list(pool.map(lambda item: _send(port, item[0], item[1]), corpus))
        problems: list[str] = []
        statuses: dict[int, int] = {}
        for (raw, _cut), reply in zip(corpus, replies, strict=True):
            if reply is None:
                continue
            why = _check(raw, reply)
            if why:
                problems.append(why + " " + repr(reply[-400:]))
            m2 = re.match(rb"HTTP/1\.1 (\d{3}) ", reply)
            if m2:
                statuses[int(m2.group(1))] = statuses.get(int(m2.group(1)), 0) + 1
        assert not problems, problems[:10]
        # the corpus exercised both sides: turns that ran and every kind of refusal
        for status in (200, 400, 403, 413, 415, 421):
            assert statuses.get(status), (status, statuses)
        assert proc.poll() is None, log.read_text()[-2000:]
        ok = json.dumps({"message": "still there?"}).encode()
        reply = _send(port, (f"POST /chat HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {len(ok)}\r\nConnection: close\r\n\r\n").encode() + ok, False)
        assert reply is not None and reply.startswith(b"HTTP/1.1 200") and b'"text": "ok"' in reply.replace(b'":"', b'": "')
        lines = log.read_text(errors="replace").splitlines()
        assert not any("Traceback" in line or "Exception in ASGI" in line for line in lines), lines[:5]
        # a line per kind of refusal per 5 s (about ten kinds here), not one per bad request
        assert len(lines) <= 30, f"{len(lines)} log lines for {COUNT} requests: refusals are not rate-limited"
    finally:
        proc.kill()
        proc.wait(timeout=10)

