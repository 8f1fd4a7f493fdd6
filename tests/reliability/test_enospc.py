"""A real full disk (ENOSPC on a small tmpfs) under a live HTTP server.

The data dir lives on a 4 MiB tmpfs mounted for the test (skipped where this
process may not mount one). Calls are acknowledged, then a filler file takes
every free byte: the journal's next append gets ``ENOSPC``. Asserted:

- the call that meets the full disk gets a clear error saying the journal
  failed and why, with the right certainty: an effectful call is refused
  *before* its handler (its start record could not be written: the effect
  did not happen, ``known``); a read's handler ran and only its receipt
  could not be written;
- ``/healthz`` answers 503 while the journal is failed;
- nothing acknowledged is lost: every receipt a client received is in the
  journal afterwards, ``journal verify`` passes, and the effect count equals
  the acknowledged effectful calls (the refused one never ran);
- the server recovers when space returns: through ``journal reopen PATH``
  (automatic re-opening off: the operator's word), or by itself within the
  re-open interval with no call arriving (the watcher).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from openfunctions.core.journal import read_records
from openfunctions.servers import RECEIPT_META_KEY

from .._net import free_port, wait_for_port
from ..servers.conftest import journaled_receipts, serve_argv, server_env

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientInfo": {"name": "enospc", "version": "0"},
               "io.modelcontextprotocol/clientCapabilities": {}}


@pytest.fixture
def tmpfs(tmp_path: Path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount(8) here: the real-ENOSPC test needs a small tmpfs (RLIMIT_FSIZE covers EFBIG)")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode}): the real-ENOSPC test "
                    "needs one (RLIMIT_FSIZE covers EFBIG in tests/servers/test_journal_failure.py)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


class Server:
    def __init__(self, data_dir: Path, effects: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.health = f"http://127.0.0.1:{self.port}/healthz"
        env = server_env(ENOSPC_EFFECTS=str(effects))
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])
        self.proc = subprocess.Popen(
            serve_argv("--transport", "http", "--port", str(self.port), "--stateless", "--module",
                       "enospc_tools:registry", "--data-dir", str(data_dir), "--log-level", "info", *extra),
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_for_port(self.port, self.proc)
        self.acknowledged: list[str] = []

    def call(self, tool: str, text: str) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": tool, "arguments": {"text": text}, "_meta": MODERN_META}}
        resp = httpx.post(self.url, json=body, timeout=30, headers={
            "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call", "Mcp-Name": tool})
        msg = resp.json() if resp.headers.get("content-type", "").startswith("application/json") else [
            json.loads(ln[5:]) for ln in resp.text.splitlines() if ln.startswith("data:") and ln[5:].strip()][-1]
        result = msg["result"]
        receipt = result.get("_meta", {}).get(RECEIPT_META_KEY)
        if not result.get("isError") and receipt:
            self.acknowledged.append(receipt["receipt_id"])
        return result

    def healthy(self) -> int:
        return httpx.get(self.health, timeout=30).status_code

    def stop(self) -> str:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        return self.proc.stderr.read() if self.proc.stderr else ""


def _fill(mnt: Path) -> Path:
    """Take every free byte of the filesystem; returns the filler file."""
    filler = mnt / "filler"
    with open(filler, "wb") as f:
        chunk = b"\0" * 65536
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError as exc:
            assert exc.errno == 28, exc  # ENOSPC, not anything else
    # Top up to the last byte.
    fd = os.open(filler, os.O_WRONLY | os.O_APPEND)
    try:
        while True:
            try:
                os.write(fd, b"\0")
            except OSError:
                break
    finally:
        os.close(fd)
    return filler


def _until_refused(server: Server, expected: list[str]) -> dict[str, Any]:
    """Effectful calls until one is refused; the acknowledged ones join ``expected``. Returns the refused result
    (with its text under ``"text"``)."""
    for i in range(200):
        text = f"full-{i}"
        result = server.call("note", text)
        if result.get("isError"):
            return {**result, "text": text}
        expected.append(text)
    raise AssertionError("200 calls still fit on a full disk")


def _journal_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "openfunctions.servers", "journal", *args],
                          capture_output=True, text=True, timeout=120)


def _effects(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_real_full_disk_fails_the_call_clearly_loses_nothing_and_journal_reopen_brings_it_back(tmpfs, tmp_path):
    data, effects = tmpfs / "data", tmp_path / "effects.txt"
    server = Server(data, effects, "--journal-reopen-interval", "0")  # only the operator brings it back
    journal = data / "journal" / "tools.journal"
    try:
        expected: list[str] = []
        for i in range(5):
            assert not server.call("note", f"before-{i}").get("isError")
            expected.append(f"before-{i}")
        assert not server.call("look", "before").get("isError")
        assert server.healthy() == 200
        filler = _fill(tmpfs)

        # The call that meets the full disk: whichever of its two records did not fit decides its certainty.
        # (The journal file's last page may still hold a record or two: calls succeed until it is used up.)
        first = _until_refused(server, expected)
        text = first["content"][0]["text"]
        assert "journal" in text and "failed" in text and "No space left on device" in text, text
        first_receipt = first["_meta"][RECEIPT_META_KEY]
        if first_receipt["handler_started"]:
            # Its start fit (the file's last page had room) and its receipt did not: the effect happened,
            # and nothing durable says so, so the client is told "unknown" -- never "not applied".
            assert first_receipt["certainty"] == "unknown" and first_receipt["outcome"] == "unknown"
            assert first_receipt["error"]["code"] == "receipt_persistence_failed"
            assert _effects(effects).count(first["text"]) == 1
            expected.append(first["text"])
        else:
            assert first_receipt["certainty"] == "known"
            assert first["text"] not in _effects(effects)
        # Once failed, every effectful call is refused before its handler: known, and no effect.
        refused = server.call("note", "refused")
        assert refused["isError"] is True and "No space left on device" in refused["content"][0]["text"]
        receipt = refused["_meta"][RECEIPT_META_KEY]
        assert receipt["certainty"] == "known" and receipt["handler_started"] is False, receipt
        assert receipt["outcome"] == "rejected" and "journal reopen" in refused["content"][0]["text"]
        assert "refused" not in _effects(effects)

        read = server.call("look", "while-full")
        assert read["isError"] is True and "journal" in read["content"][0]["text"]
        assert server.healthy() == 503

        # The operator asks too early: refused, with the reason.
        early = _journal_cli("reopen", str(journal), "--wait", "30")
        assert early.returncode == 1, early.stdout + early.stderr
        assert "No space left on device" in early.stderr and "probe" in early.stderr, early.stderr
        assert server.healthy() == 503  # and it stays failed: nothing re-opens by itself with the interval off

        filler.unlink()  # space returns
        time.sleep(2)
        assert server.healthy() == 503  # still only the operator's word brings it back
        ok = _journal_cli("reopen", str(journal), "--wait", "30")
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert "re-opened" in ok.stdout
        assert server.healthy() == 200
        assert not server.call("note", "after").get("isError")
        expected.append("after")
        again = _journal_cli("reopen", str(journal), "--json")
        assert again.returncode == 0 and json.loads(again.stdout)["status"] == "healthy"
    finally:
        log = server.stop()
    assert "journal_failed" in log and "journal_reopen_requested" in log and "journal_reopened" in log
    verify = _journal_cli("verify", str(journal))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    on_disk = journaled_receipts(data)
    assert len(server.acknowledged) >= 7  # 5 notes + 1 look before the disk filled, 1 note after (+ what still fit)
    assert set(server.acknowledged) <= set(on_disk), set(server.acknowledged) - set(on_disk)
    # Every effect exactly once; the refused call never ran; nothing was re-run by the re-open's recovery.
    assert _effects(effects) == expected
    print(f"\nenospc: {len(server.acknowledged)} acknowledged receipts, all on disk; {len(expected)} effects, "
          f"each once; the call that met the full disk: handler_started={first_receipt['handler_started']}, "
          f"certainty={first_receipt['certainty']}")
    if first_receipt["handler_started"]:  # the re-open's recovery settled the call whose receipt the full disk refused: unknown, as the client heard
        recovered = [r.data for r in read_records(journal) if r.type == "receipt"
                     and r.data["receipt_id"] == first_receipt["receipt_id"]]
        assert len(recovered) == 1 and recovered[0]["outcome"] == "unknown" and recovered[0]["recovered"] is True


def test_with_automatic_reopen_the_server_recovers_by_itself_when_space_returns(tmpfs, tmp_path):
    data, effects = tmpfs / "data", tmp_path / "effects.txt"
    server = Server(data, effects, "--journal-reopen-interval", "1")
    journal = data / "journal" / "tools.journal"
    try:
        assert not server.call("note", "before").get("isError")
        expected = ["before"]
        filler = _fill(tmpfs)
        first = _until_refused(server, expected)
        if first["_meta"][RECEIPT_META_KEY]["handler_started"]:
            expected.append(first["text"])
        assert server.healthy() == 503
        filler.unlink()
        # No call, no health check: the server's watcher re-opens the journal on its own.
        deadline = time.monotonic() + 60
        while "journal_reopened" not in (server.proc.stderr.readline() if server.proc.stderr else ""):
            assert time.monotonic() < deadline, "the journal never re-opened by itself"
        assert server.healthy() == 200
        assert not server.call("note", "after").get("isError")
    finally:
        server.stop()
    assert _journal_cli("verify", str(journal)).returncode == 0
    assert set(server.acknowledged) <= set(journaled_receipts(data))
    assert _effects(effects) == expected + ["after"]
