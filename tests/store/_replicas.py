"""Server replicas on one PostgreSQL: start ``serve --database`` subprocesses, drive load, read what clients saw."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from tests._net import free_port, wait_for_port

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
    """One tools/call; the receipt the client saw (``{}`` if the reply never came)."""
    body = {"jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": "bump", "arguments": {"n": n}, "_meta": META}}
    resp = client.post(url, content=json.dumps(body), headers=HEADERS, timeout=30)
    text = resp.text
    if resp.status_code != 200:
        raise ValueError(f"HTTP {resp.status_code}: {text[:200]}")
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        msgs = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]
        msg = next(m for m in reversed(msgs) if "result" in m or "error" in m)
    else:
        msg = resp.json()
    return (msg.get("result") or {}).get("_meta", {}).get(RECEIPT_META_KEY, {})


class Load:
    """``workers`` threads calling ``url`` until stopped; ``seen`` holds every receipt a client received."""

    def __init__(self, url: str, workers: int = 4) -> None:
        self.url = url
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
                    receipt = call(client, self.url, n)
                except (httpx.HTTPError, ValueError, StopIteration) as exc:
                    with self._lock:
                        self.errors += 1
                        self.last_error = f"{type(exc).__name__}: {exc}"
                    continue
                if receipt:
                    with self._lock:
                        self.seen.append(receipt)

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
