"""SIGKILL the HTTP server again and again under load: nothing acknowledged is ever lost.

``OPENFUNCTIONS_KILL_ROUNDS`` rounds (default 20; 1,000 for a soak run). Each
round starts the server on the same data dir (a restart: recovery runs),
drives it with concurrent clients, and kills it with SIGKILL after a random
number of acknowledged calls. Asserted at the end: every receipt a client
received is in the journal, every start has its receipt (recovery settled
the calls the kills interrupted, as ``unknown``), and ``journal verify``
passes on every journal file.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading

import httpx
import pytest

from openfunctions.core.journal import read_records, segment_paths

from .._net import free_port, wait_for_port
from ..servers.conftest import serve_argv, server_env
from ._targets import MODERN_META

pytestmark = pytest.mark.slow

ROUNDS = int(os.environ.get("OPENFUNCTIONS_KILL_ROUNDS", "20"))
CLIENTS = 4
RECEIPT_KEY = "dev.openfunctions/receipt"


def _call(client: httpx.Client, url: str, text: str) -> str:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "of_hash_text", "arguments": {"text": text}, "_meta": MODERN_META}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "of_hash_text"}
    resp = client.post(url, json=body, headers=headers)
    resp.raise_for_status()
    msgs = [json.loads(ln[5:]) for ln in resp.text.splitlines() if ln.startswith("data:") and ln[5:].strip()] \
        if resp.headers.get("content-type", "").startswith("text/event-stream") else [resp.json()]
    result = msgs[-1]["result"]
    assert result.get("isError") is not True, result
    return result["_meta"][RECEIPT_KEY]["receipt_id"]


def test_sigkill_under_load_loses_no_acknowledged_receipt(tmp_path):
    data = tmp_path / "data"
    rng = random.Random(19)
    acked: set[str] = set()
    lock = threading.Lock()
    kills = 0
    for round_no in range(ROUNDS + 1):
        port = free_port()
        proc = subprocess.Popen(
            serve_argv("--transport", "http", "--port", str(port), "--stateless", "--data-dir", str(data)),
            env=server_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        try:
            wait_for_port(port, proc, timeout=120)  # the restart: recovery ran before it listens
            url = f"http://127.0.0.1:{port}/mcp"
            if round_no == ROUNDS:  # the last start only proves restart works after the final kill
                with httpx.Client(timeout=60) as c:
                    acked.add(_call(c, url, "after the last kill"))
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=60) == 0
                break
            stop = threading.Event()
            round_acks = [0]
            target = rng.randrange(3, 40)
            reached = threading.Event()

            # this round's objects bound now (B023): the threads are joined before the next round anyway
            def load(n: int, stop: threading.Event = stop, url: str = url, round_no: int = round_no,
                     round_acks: list[int] = round_acks, target: int = target, reached: threading.Event = reached) -> None:
                with httpx.Client(timeout=60) as c:
                    i = 0
                    while not stop.is_set():
                        i += 1
                        try:
                            rid = _call(c, url, f"{round_no}-{n}-{i}")
                        except (httpx.HTTPError, OSError):
                            return  # the server is gone: this call was never acknowledged
                        with lock:
                            acked.add(rid)
                            round_acks[0] += 1
                            if round_acks[0] >= target:
                                reached.set()

            threads = [threading.Thread(target=load, args=(n,)) for n in range(CLIENTS)]
            for th in threads:
                th.start()
            assert reached.wait(timeout=120), f"round {round_no}: only {round_acks[0]} calls acknowledged"
            proc.send_signal(signal.SIGKILL)  # mid-load: calls are in flight
            kills += 1
            proc.wait(timeout=30)
            stop.set()
            for th in threads:
                th.join(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            proc.stderr.close()

    files = sorted((data / "journal").glob("*.journal"))
    assert files
    receipts: set[str] = set()
    starts: set[str] = set()
    recovered = 0
    for f in files:
        for path in [*segment_paths(f), f]:
            for rec in read_records(path):
                rid = (rec.data or {}).get("receipt_id")
                if rec.type == "start":
                    starts.add(rid)
                elif rec.type == "receipt":
                    receipts.add(rid)
                    recovered += bool(rec.data.get("recovered"))
        verify = subprocess.run([sys.executable, "-m", "openfunctions.servers", "journal", "verify", str(f)],
                                capture_output=True, text=True, timeout=120)
        assert verify.returncode == 0, verify.stdout + verify.stderr
    missing = acked - receipts
    print(f"\nkill loop: {kills} SIGKILLs, {len(acked)} acknowledged receipts, {len(missing)} missing, "
          f"{recovered} settled unknown by recovery, {len(starts - receipts)} starts unsettled")
    assert kills == ROUNDS
    assert not missing, sorted(missing)[:10]
    assert starts <= receipts  # every interrupted call was settled by the restart's recovery
