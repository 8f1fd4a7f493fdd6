"""Server subprocesses driven by raw JSON-RPC, for the reliability suite (stdio, stateless HTTP, HTTP sessions)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from .._net import free_port, wait_for_port
from ..servers.conftest import serve_argv, server_env

LEGACY = "2025-11-25"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
class StdioTarget:
    def __init__(self, profile: str, data_dir: Path, *extra: str) -> None:
        self.profile = profile
        self.proc = subprocess.Popen(
            serve_argv("--profile", profile, "--data-dir", str(data_dir), *extra),
            env=server_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.replies: dict[Any, list[dict]] = {}
        self.problems: list[str] = []
        self.stderr = bytearray()
        self.lines = 0
        self._cv = threading.Condition()
        threading.Thread(target=self._pump_out, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    def _pump_out(self) -> None:
        from ._fuzz import check_reply

        for raw in self.proc.stdout:
            self.lines += 1
            try:
                msg = json.loads(raw)
            except ValueError:
                self.problems.append(f"stdout pollution: {raw[:120]!r}")
                continue
            why = check_reply(msg)
            if why:
                self.problems.append(f"{why}: {raw[:300]!r}")
            if isinstance(msg, dict) and "id" in msg and "method" not in msg:
                key = json.dumps(msg["id"])
                with self._cv:
                    self.replies.setdefault(key, []).append(msg)
                    self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def _pump_err(self) -> None:
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):
            self.stderr += chunk

    def send(self, data: bytes) -> None:
        self.proc.stdin.write(data + b"\n")
        self.proc.stdin.flush()

    def request(self, rid: str, method: str, params: dict | None = None, timeout: float = 60.0) -> dict:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(json.dumps(msg).encode())
        return self.wait_for(rid, timeout)

    def wait_for(self, rid: str, timeout: float) -> dict:
        key = json.dumps(rid)
        deadline = time.monotonic() + timeout
        with self._cv:
            while key not in self.replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(f"{self.profile}/stdio: no reply to {rid!r} (exit code {self.proc.poll()})")
                self._cv.wait(min(left, 0.5))
            return self.replies[key][0]

    def start(self, timeout: float = 120.0) -> list[dict]:
        self.request("init", "initialize", {"protocolVersion": LEGACY, "capabilities": {},
                                            "clientInfo": {"name": "fuzz", "version": "0"}}, timeout)
        self.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())
        return self.request("list", "tools/list")["result"]["tools"]

    def close(self, timeout: float = 60.0) -> int:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)


class HttpTarget:
    """``serve --transport http --stateless``: every request stands alone (2026-07-28, per-request ``_meta``)."""

    MODE = ("--stateless",)

    def __init__(self, profile: str, data_dir: Path, *extra: str) -> None:
        self.profile = profile
        self._argv = ("--profile", profile, "--data-dir", str(data_dir), "--transport", "http", *self.MODE, *extra)
        self._spawn()
        self.problems: list[str] = []
        self.stderr = bytearray()
        self.client = httpx.Client(timeout=60)

    def _spawn(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen(serve_argv(*self._argv, "--port", str(self.port)),
                                     env=server_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def _listening(self, timeout: float) -> None:
        """Wait for the server to listen; a free port can be taken between probing and binding (the
        server then exits saying so), so up to two more tries on new ports."""
        for attempt in range(3):
            try:
                wait_for_port(self.port, self.proc, timeout)
            except RuntimeError as exc:
                if "already in use" not in str(exc) or attempt == 2:
                    raise
                self._spawn()
                continue
            # From here on stderr is drained (wait_for_port reads it when the server exits early): a server that
            # logs more than a pipe holds must not block, and a failure can show what the server said.
            threading.Thread(target=self._pump_err, daemon=True).start()
            return

    def _pump_err(self) -> None:
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):
            self.stderr += chunk

    def wrap(self, params: dict[str, Any]) -> dict[str, Any]:
        """A request's params as this target's protocol wants them."""
        return {**params, "_meta": MODERN_META}

    def headers(self, method: str = "tools/list", name: str | None = None) -> dict[str, str]:
        h = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
             "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
        if name:
            h["Mcp-Name"] = name
        return h

    def start(self, timeout: float = 120.0) -> list[dict]:
        self._listening(timeout)
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": MODERN_META}}
        return self.messages(self.client.post(self.url, json=body, headers=self.headers()))[-1]["result"]["tools"]

    @staticmethod
    def messages(resp: httpx.Response) -> list[Any]:
        if resp.headers.get("content-type", "").startswith("text/event-stream"):
            return [json.loads(ln[5:]) for ln in resp.text.splitlines() if ln.startswith("data:") and ln[5:].strip()]
        if resp.headers.get("content-type", "").startswith("application/json") and resp.content:
            return [resp.json()]
        return []

    def close(self) -> int:
        import signal

        self.client.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=10)


class HttpSessionTarget(HttpTarget):
    """``serve --transport http`` with sessions: one ``initialize`` (2025-11-25), then every request carries
    ``Mcp-Session-Id``. :meth:`headers` may be told to send a wrong or no session id (the fuzzer does, sometimes)."""

    MODE = ()

    session_id = ""
    initialized = 0

    def headers(self, method: str = "tools/list", name: str | None = None, session: str | None = None) -> dict[str, str]:
        h = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
             "MCP-Protocol-Version": LEGACY}
        sid = self.session_id if session is None else session
        if sid:
            h["Mcp-Session-Id"] = sid
        return h

    def wrap(self, params: dict[str, Any]) -> dict[str, Any]:
        return params

    def start(self, timeout: float = 120.0) -> list[dict]:
        self._listening(timeout)
        init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "0"}}}
        resp = self.client.post(self.url, json=init, headers=self.headers(session=""))
        self.session_id = resp.headers["mcp-session-id"]
        self.initialized += 1
        self.client.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers())
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        return self.messages(self.client.post(self.url, json=body, headers=self.headers()))[-1]["result"]["tools"]
