"""Shared helpers for the server tests: fixture tools, subprocess servers, free ports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .._harness import await_file, free_port, wait_for, wait_for_file, wait_for_port  # noqa: F401  (re-exported)
from .._harness.tree import copy_source_tree

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


@pytest.fixture(scope="session")
def dists(tmp_path_factory):
    """The release artifacts, built once a session: ``python -m build --no-isolation`` makes the sdist and
    then the wheel *from the sdist* (a file missing from the sdist breaks the wheel). Returns (sdist, wheel);
    test_release.py checks them, test_packaging.py runs the wheel the way a user does."""
    pytest.importorskip("build", reason="the test extra installs build")
    out = tmp_path_factory.mktemp("dist")
    # from a copy: a build in place writes into the checkout while other workers read it (tests/_harness/tree.py)
    src = copy_source_tree(tmp_path_factory.mktemp("src") / "openfunctions-mcp")
    proc = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "deprecated" not in proc.stdout + proc.stderr, "setuptools warns about our metadata"
    (sdist,) = out.glob("openfunctions_mcp-*.tar.gz")
    (wheel,) = out.glob("openfunctions_mcp-*.whl")
    return sdist, wheel


def server_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def serve_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "openfunctions.servers", "serve", *args]


async def cancel_slow_call(client, markers: Path) -> None:
    """Call the fixture's ``slow`` tool through an SDK ``client``, cancel the call once it runs,
    and return when the handler has seen the cancellation."""
    import anyio

    async with anyio.create_task_group() as tg:

        async def call() -> None:
            await client.call_tool("slow", {"dir": str(markers)})

        tg.start_soon(call)
        await await_file(markers / "started")
        tg.cancel_scope.cancel()
    await await_file(markers / "cancelled")


def _start_http(data_dir: Path, procs: list[subprocess.Popen], *extra: str, env: dict[str, str] | None = None,
                path: str = "/mcp", log: Path | None = None) -> tuple[str, subprocess.Popen]:
    """Start ``serve --transport http``; its output goes to pipes the test may read, or to ``log`` (a server
    that outlives one test must not fill a pipe nobody reads)."""
    port = free_port()
    argv = serve_argv(
        "--transport", "http", "--port", str(port), "--path", path,
        "--module", "fixture_tools:registry", "--example-tools", "--data-dir", str(data_dir), *extra,
    )
    if log is None:
        proc = subprocess.Popen(argv, env=server_env(**(env or {})), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    else:
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, env=server_env(**(env or {})), stdout=out, stderr=subprocess.STDOUT)
    procs.append(proc)
    wait_for_port(port, proc, output=None if log is None else lambda: log.read_text(errors="replace"))
    return f"http://127.0.0.1:{port}{path}", proc


def _stop_all(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
        for s in (p.stdout, p.stderr):
            if s:
                s.close()


@pytest.fixture
def http_server(tmp_path):
    """Yields ``start(*extra, env=, path=)``: it runs `serve --transport http` on a free port and
    returns ``(url, proc)``. Every server started is killed after the test."""
    procs: list[subprocess.Popen] = []
    yield lambda *extra, **kw: _start_http(tmp_path / "data", procs, *extra, **kw)
    _stop_all(procs)


@pytest.fixture(scope="module")
def shared_http_server(tmp_path_factory):
    """``http_server`` for the tests of one module that only talk to the server: ``start(*extra)`` starts one
    server per distinct ``extra`` and hands the same one to every later test asking for it (a server start is
    a second or two; a test that stops the server, reads its journal or its stderr takes ``http_server``)."""
    procs: list[subprocess.Popen] = []
    started: dict[tuple[str, ...], tuple[str, subprocess.Popen]] = {}

    def start(*extra: str) -> tuple[str, subprocess.Popen]:
        if extra not in started or started[extra][1].poll() is not None:
            root = tmp_path_factory.mktemp("shared-http")
            started[extra] = _start_http(root / "data", procs, *extra, log=root / "server.log")
        return started[extra]

    yield start
    _stop_all(procs)


class RawSession:
    """A server subprocess driven with hand-written JSON-RPC lines (for what the SDK client would never send)."""

    def __init__(self, *extra: str, data_dir: Path, env: dict[str, str] | None = None) -> None:
        import queue
        import threading

        argv = serve_argv("--module", "fixture_tools:registry", "--example-tools", "--data-dir", str(data_dir), *extra)
        self.proc = subprocess.Popen(
            argv, env=server_env(**(env or {})), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.stdout_lines: list[bytes] = []
        self.stderr = bytearray()

        def pump_out() -> None:
            for line in self.proc.stdout:
                self.stdout_lines.append(line)
                self.lines.put(line)
            self.lines.put(None)

        def pump_err() -> None:
            for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):
                self.stderr += chunk

        self._threads = [threading.Thread(target=pump_out, daemon=True), threading.Thread(target=pump_err, daemon=True)]
        for t in self._threads:
            t.start()
        self._next_id = 0

    def send_raw(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict) -> None:
        import json

        self.send_raw(json.dumps(message).encode() + b"\n")

    def request(self, method: str, params: dict | None = None) -> int:
        self._next_id += 1
        msg = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self._next_id

    def read(self, timeout: float = 30.0) -> dict:
        import json

        line = self.lines.get(timeout=timeout)
        if line is None:
            raise EOFError("server closed stdout")
        return json.loads(line)

    def response(self, rid, timeout: float = 30.0) -> dict:
        """Read until the response with id ``rid`` (notifications in between are skipped)."""
        while True:
            msg = self.read(timeout)
            if msg.get("id") == rid and ("result" in msg or "error" in msg):
                return msg

    def call(self, method: str, params: dict | None = None) -> dict:
        return self.response(self.request(method, params))

    def start_slow(self, markers: Path) -> int:
        """Call the fixture's ``slow`` tool (it runs until ``markers/release`` exists); return once it runs."""
        rid = self.request("tools/call", {"name": "slow", "arguments": {"dir": str(markers)}})
        wait_for_file(markers / "started")
        return rid

    def wait_for_stderr(self, needle: bytes, timeout: float = 30.0) -> None:
        try:
            wait_for(lambda: needle in bytes(self.stderr), timeout=timeout, what=f"{needle!r} on stderr")
        except AssertionError as exc:
            raise TimeoutError(f"{exc}: {bytes(self.stderr)[-2000:]!r}") from None

    def initialize(self, version: str = "2025-11-25") -> dict:
        out = self.call("initialize", {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return out

    def close(self, timeout: float = 20.0) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            for t in self._threads:
                t.join(timeout=5)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def raw_stdio(tmp_path):
    sessions: list[RawSession] = []

    def start(*extra: str, env: dict[str, str] | None = None) -> RawSession:
        s = RawSession(*extra, data_dir=tmp_path / "data", env=env)
        sessions.append(s)
        return s

    yield start
    for s in sessions:
        s.kill()
        for f in (s.proc.stdin, s.proc.stdout, s.proc.stderr):
            try:
                f.close()
            except Exception:
                pass


def journaled_receipts(data_dir: Path) -> dict[str, list[str]]:
    """receipt_id -> record types, over every execution journal in ``data_dir`` (read lock-free)."""
    from openfunctions.core.journal import read_records

    out: dict[str, list[str]] = {}
    for f in sorted((data_dir / "journal").glob("*.journal")):
        for rec in read_records(f):
            rid = (rec.data or {}).get("receipt_id")
            if rid:
                out.setdefault(rid, []).append(rec.type)
    return out
