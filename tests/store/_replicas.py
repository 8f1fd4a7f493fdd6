"""Server replicas on one PostgreSQL: start ``serve --database`` subprocesses (tools or work), put a real haproxy
in front of them, drive load, read what clients saw."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests._net import free_port, wait_for_port
from tests._pg import _required

HERE = Path(__file__).resolve().parent
RECEIPT_META_KEY = "dev.openfunctions/receipt"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "replica-test", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
           "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "bump"}


def start_replica(dsn: str | None, data_dir: Path, port: int | None = None, *extra: str) -> tuple[str, subprocess.Popen]:
    """``extra``: more serve options (behind a balancer: ``--allowed-host`` naming the balancer's address).
    ``dsn=None``: the file journal in ``data_dir`` (the single-machine peer)."""
    port = port or free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               PYTHONUNBUFFERED="1")
    env.pop("OPENFUNCTIONS_DATABASE_URL", None)
    argv = [sys.executable, "-m", "openfunctions.servers", "serve", "--transport", "http", "--stateless",
            "--port", str(port), "--module", "replica_tools:registry", "--no-example-tools",
            "--data-dir", str(data_dir), *(["--database", dsn] if dsn else []), *extra]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_port(port, proc)
    return f"http://127.0.0.1:{port}/mcp", proc


def call(client: httpx.Client, url: str, n: int) -> dict:
    """One tools/call of ``bump``; the receipt the client saw. No reply (a killed server, a balancer's 502) or a
    JSON-RPC error raises ``httpx.HTTPError`` / ``ValueError`` (:func:`tool_call`): ``Load`` counts it as failed."""
    return receipt_of(tool_call(url, "bump", {"n": n}, timeout=30, client=client))


class Load:
    """``workers`` threads calling ``url`` until stopped; ``seen`` holds every receipt a client received.

    ``call_once(client, n)``: one call, its receipt (default: ``bump`` with ``n``); raising ``httpx.HTTPError``
    or ``ValueError`` counts as a call without a reply. ``pause``: seconds between a thread's calls.
    """

    def __init__(self, url: str, workers: int = 4, call_once: Callable[[httpx.Client, int], dict] | None = None,
                 pause: float = 0.0) -> None:
        self.url = url
        self.call_once = call_once or (lambda client, n: call(client, self.url, n))
        self.pause = pause
        self.seen: list[dict] = []
        self.errors = 0
        self.last_error = ""
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(w,), daemon=True) for w in range(workers)]

    def _run(self, w: int) -> None:
        n = w * 1_000_000
        with httpx.Client() as client:
            while not self._stop.is_set():
                n += 1
                try:
                    receipt = self.call_once(client, n)
                except (httpx.HTTPError, ValueError, StopIteration) as exc:
                    with self._lock:
                        self.errors += 1
                        self.last_error = f"{type(exc).__name__}: {exc}"
                    continue
                if receipt:
                    with self._lock:
                        self.seen.append(receipt)
                if self.pause:
                    self._stop.wait(self.pause)

    def start(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=60)


def db_receipts(dsn: str, journal: str = "tools") -> dict[str, dict]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT data FROM of_journal_records WHERE journal = %s AND type = 'receipt'",
                            (journal,)).fetchall()
    return {d["receipt_id"]: d for d in (json.loads(r[0]) for r in rows)}


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    if proc.stderr:
        proc.stderr.close()


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


HAPROXY_CFG = """\
global
    maxconn 256
defaults
    mode http
    timeout connect 2s
    timeout client {timeout}s
    timeout server {timeout}s
    option redispatch
    retries 2
frontend front
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk
    http-check send meth GET uri /healthz ver HTTP/1.1 hdr Host 127.0.0.1:{port}
{servers}
"""


def haproxy_binary() -> str:
    """Debian's haproxy; missing: the test skips, except in CI (``CI``/``OPENFUNCTIONS_REQUIRE_INTEROP``), where it fails."""
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")
    if found is None:
        msg = "haproxy is not installed (Debian: apt-get install -y haproxy)"
        if _required():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return found


def start_haproxy(binary: str, port: int, urls: list[str], cfg: Path, *, timeout: float = 30) -> subprocess.Popen:
    """haproxy on 127.0.0.1:``port``, round robin over ``urls`` (health-checked every 200 ms; one failure: down).

    It retries only connection failures (haproxy's default ``retry-on``): a request a replica took and died
    under is never re-sent; its client gets a 502, no reply.
    """
    servers = "\n".join(f"    server r{i} {url.split('//')[1].split('/')[0]} check inter 200ms fall 1 rise 2"
                        for i, url in enumerate(urls))
    cfg.write_text(HAPROXY_CFG.format(port=port, servers=servers, timeout=int(timeout)))
    lb = subprocess.Popen([binary, "-db", "-f", str(cfg)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_port(port, lb)
    return lb


def start_work_replica(dsn: str, data_dir: Path, catalog: Path, *extra: str, ttl: float = 3.0,
                       principal: str = "agent", env: dict[str, str] | None = None) -> tuple[str, subprocess.Popen]:
    """``serve --profile work --transport http --stateless --database dsn`` (its own data dir, lease TTL ``ttl``;
    ``env``: more environment, e.g. the test hooks of tests/work/_inject)."""
    port = free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    env.pop("OPENFUNCTIONS_DATABASE_URL", None)
    argv = [sys.executable, "-m", "openfunctions.servers", "serve", "--profile", "work", "--transport", "http",
            "--stateless", "--port", str(port), "--data-dir", str(data_dir), "--catalog", str(catalog),
            "--principal", principal, "--database", dsn, "--work-lease-ttl", str(ttl), *extra]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wait_for_port(port, proc)
    return f"http://127.0.0.1:{port}/mcp", proc


def tool_call(url: str, name: str, arguments: dict | None = None, *, timeout: float = 60,
              client: httpx.Client | None = None) -> dict:
    """One tools/call of ``name``; its MCP result (``structuredContent``, ``isError``, ``content``, ``_meta``).
    No reply (a killed server, a 502 from the balancer) raises ``httpx.HTTPError`` or ``ValueError``."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": name, "arguments": arguments or {}, "_meta": META}}
    headers = {**HEADERS, "Mcp-Name": name}
    resp = (client or httpx).post(url, content=json.dumps(body), headers=headers, timeout=timeout)
    if resp.status_code != 200:
        raise ValueError(f"HTTP {resp.status_code}: {resp.text[:300]}")
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        msgs = [json.loads(x[5:]) for x in resp.text.splitlines() if x.startswith("data:") and x[5:].strip()]
        msg = next(m for m in reversed(msgs) if "result" in m or "error" in m)
    else:
        msg = resp.json()
    if "result" not in msg:
        raise ValueError(f"JSON-RPC error: {msg}")
    return dict(msg["result"])


def receipt_of(result: dict) -> dict:
    return dict((result.get("_meta") or {}).get(RECEIPT_META_KEY) or {})
