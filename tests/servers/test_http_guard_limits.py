"""The HTTP guard on real sockets: head and body timeouts, the connection cap, file-descriptor exhaustion,
mid-body disconnects, port forwarding. Servers run in their own processes on 127.0.0.1 (the chat server
through ``guard_chat_server.py``, the MCP server through ``serve --transport http``); their logs go to a
file so that a flood of log lines can be counted (a pipe would fill up and stall the server).
Every wait is bounded; every server is killed at the end.
"""

from __future__ import annotations

import json
import os
import re
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .._net import read_until_closed
from .conftest import HERE, free_port, serve_argv, server_env, wait_for_port

pytestmark = pytest.mark.slow  # subprocess servers
WAIT = 20.0  # the bound on any one wait below; a healthy run takes a fraction of it


def _until(check: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.02)


class Served:
    """A server process, its port and its log file."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log

    def log_lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def connect(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=WAIT)
        return s

    def request(self, raw: bytes) -> bytes:
        """Send ``raw``, return everything the server sends until it closes (or WAIT passes)."""
        with self.connect() as s:
            s.sendall(raw)
            return read_until_closed(s)

    def get(self, path: str, host: str | None = None) -> tuple[int, bytes]:
        head = f"GET {path} HTTP/1.1\r\nHost: {host or f'127.0.0.1:{self.port}'}\r\nConnection: close\r\n\r\n"
        return _status_and_body(self.request(head.encode()))



def _status_and_body(raw: bytes) -> tuple[int, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.fixture
def chat_server(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(**options: Any) -> Served:
        log = tmp_path / f"chat{len(procs)}.log"
        out = tmp_path / f"chat{len(procs)}.out"
        with log.open("wb") as err, out.open("wb") as stdout:
            proc = subprocess.Popen([sys.executable, str(HERE / "guard_chat_server.py"), str(tmp_path / f"d{len(procs)}"),
                                     json.dumps(options)], env=server_env(), stdout=stdout, stderr=err)
        procs.append(proc)

        def port() -> int | None:
            if proc.poll() is not None:
                raise RuntimeError(f"the chat server exited: {log.read_text()[-2000:]}")
            m = re.search(r"port (\d+)", out.read_text())
            return int(m.group(1)) if m else None

        served = Served(proc, _until(port, "the chat server to listen"), log)
        served.out = out  # type: ignore[attr-defined]
        return served

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def _fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# -- connection cap and head timeout --------------------------------------------------------------------------


def test_chat_half_open_connections_past_the_cap_get_503_and_the_rest_are_closed_at_the_head_timeout(chat_server):
    """A client that opens connections and never finishes a head (no token needed: auth runs after the head)
    holds at most max_connections of them, each for at most header_timeout; then the server answers again."""
    server = chat_server(max_connections=8, header_timeout=1.0)
    half_open = [server.connect() for _ in range(12)]
    for s in half_open:
        s.sendall(b"POST /chat HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # a head that never ends
    answers = [read_until_closed(s) for s in half_open]  # each recv ends when the server closes (bounded by WAIT)
    refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
    closed_silently = [a for a in answers if a == b""]
    assert len(refused) == 4 and b"too many open connections" in refused[0]
    assert len(closed_silently) == 8  # the head timer freed them without an answer: there was no request
    for s in half_open:
        s.close()
    assert server.get("/health")[0] == 200
    lines = server.log_lines()
    # four refusals, eight timeouts, each kind one line per 5 s (a second line only if the machine stalled that long)
    assert 1 <= sum('"max_connections"' in line for line in lines) <= 2
    assert 1 <= sum('"header_timeout"' in line for line in lines) <= 2


def test_chat_running_out_of_file_descriptors_logs_one_line_and_recovers(chat_server, tmp_path):
    """With every descriptor taken, accept() fails: asyncio used to log a traceback per pending connection per
    retry (thousands a second); now one line per interval, and the server answers once descriptors are back."""
    release = tmp_path / "release"
    server = chat_server(nofile=128, hog_fds=str(release))
    waiting = [server.connect() for _ in range(40)]  # queued in the listen backlog; accept() cannot take them
    _until(lambda: any('"accept_failed"' in line for line in server.log_lines()), "the accept failure to be logged")
    time.sleep(1.5)  # asyncio retries accepting once a second: let it fail a few more times
    release.write_text("now")
    _until(lambda: "released" in server.out.read_text(), "the descriptors to be released")
    for s in waiting:
        s.close()
    assert _until(lambda: server.get("/health")[0] == 200, "the server to answer again")
    lines = server.log_lines()
    assert 1 <= sum("accept_failed" in line for line in lines) <= 3, lines[:5]  # before: thousands a second
    assert not any("Traceback" in line or "out of system resource" in line for line in lines), lines[:5]


def test_mcp_server_out_of_file_descriptors_logs_one_line_and_recovers(tmp_path):
    """The same for the MCP HTTP server: its descriptor limit is lowered to what it has open, from outside."""
    port = free_port()
    log = tmp_path / "mcp.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(serve_argv("--transport", "http", "--port", str(port), "--module", "fixture_tools:registry",
                                           "--data-dir", str(tmp_path / "data")),
                                env=server_env(), stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for_port(port, proc, output=lambda: log.read_text())
        soft, hard = resource.prlimit(proc.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (_fd_count(proc.pid), hard))
        waiting = [socket.create_connection(("127.0.0.1", port), timeout=WAIT) for _ in range(40)]
        _until(lambda: "accept_failed" in log.read_text(errors="replace"), "the accept failure to be logged")
        time.sleep(1.5)
        resource.prlimit(proc.pid, resource.RLIMIT_NOFILE, (soft, hard))
        for s in waiting:
            s.close()
        served = Served(proc, port, log)
        assert _until(lambda: served.get("/healthz")[0] == 200, "the server to answer again")
        lines = served.log_lines()
        assert 1 <= sum("accept_failed" in line for line in lines) <= 3, lines[:5]  # before: thousands a second
        assert not any("Traceback" in line or "out of system resource" in line for line in lines), lines[:5]
    finally:
        proc.kill()
        proc.wait(timeout=10)


# -- bodies -------------------------------------------------------------------------------------------------------


def test_chat_body_timeout_deep_json_and_a_mid_body_disconnect(chat_server):
    server = chat_server(body_timeout=1.0)
    head = (f"POST /chat HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\ncontent-type: application/json\r\n"
            "content-length: {n}\r\n\r\n")
    # a body that stops arriving: 408 with the chat's error shape, connection closed
    status, body = _status_and_body(server.request(head.format(n=100).encode() + b'{"message": '))
    assert status == 408 and json.loads(body)["error"]["code"] == "body_timeout"
    # 30,000 levels of nesting: 400 naming the bound, not a 500 with a RecursionError
    deep = b'{"message": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
    status, body = _status_and_body(server.request(head.format(n=len(deep)).encode() + deep))
    assert status == 400 and json.loads(body)["error"] == {
        "code": "invalid_json", "message": "the body is not acceptable JSON: it nests deeper than 200 levels"}
    # a client that leaves mid-body: nothing to answer, nothing logged but a counted line
    for _ in range(5):
        with server.connect() as s:
            s.sendall(head.format(n=1000).encode() + b'{"message": "half')
    ok = b'{"message": "still there?"}'
    status, body = _status_and_body(server.request(head.format(n=len(ok)).encode().replace(
        b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n") + ok))
    assert status == 200 and json.loads(body)["text"] == "ok"
    # requests that do not parse as HTTP: 400 each, counted in one line (uvicorn logged one line per request)
    for _ in range(20):
        assert server.request(b"NOT HTTP AT ALL\r\n\r\n").startswith(b"HTTP/1.1 400")
    lines = server.log_lines()
    assert not any("Traceback" in line or "Exception in ASGI" in line for line in lines), lines
    assert 1 <= sum('"client_disconnected"' in line for line in lines) <= 2  # five clients left
    assert 1 <= sum('"invalid_http_request"' in line for line in lines) <= 2, lines
    assert not any("Invalid HTTP request received" in line and "invalid_http_request" not in line for line in lines)


# -- Host: port forwarding -------------------------------------------------------------------------------------


def test_a_loopback_mcp_server_answers_loopback_names_on_any_port_and_names_the_flag_when_it_refuses(tmp_path):
    """ssh -L Q:127.0.0.1:P, docker -p Q:P and kubectl port-forward all send Host: <loopback>:Q to a server on P."""
    port = free_port()
    log = tmp_path / "mcp.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(serve_argv("--transport", "http", "--port", str(port), "--module", "fixture_tools:registry",
                                           "--data-dir", str(tmp_path / "data"), "--log-level", "warning"),
                                env=server_env(), stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for_port(port, proc, output=lambda: log.read_text())
        served = Served(proc, port, log)
        forwarded = port + 1 if port < 65535 else port - 1
        for host in (f"127.0.0.1:{forwarded}", f"localhost:{forwarded}", f"[::1]:{forwarded}", "localhost"):
            assert served.get("/healthz", host=host)[0] == 200, host
        for _ in range(20):
            status, body = served.get("/healthz", host=f"evil.example:{port}")
            assert status == 421 and b"evil.example" in body
        refusals = [line for line in served.log_lines() if '"invalid_host"' in line]
        assert len(refusals) == 1 and "--allowed-host" in refusals[0]  # twenty refusals, one line, naming the flag
    finally:
        proc.kill()
        proc.wait(timeout=10)
    usage = subprocess.run(serve_argv("--help"), env=server_env(), capture_output=True, text=True, timeout=60).stdout
    assert "loopback names on any port" in " ".join(usage.split())
