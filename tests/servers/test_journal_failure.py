"""A journal that fails (disk full) says so loudly and comes back through recovery."""

from __future__ import annotations

import resource
import subprocess
import sys
import time

import httpx
import pytest

from openfunctions.core import ToolRegistry
from openfunctions.core.errors import JournalFailed
from openfunctions.core.journal import file_stamp
from openfunctions.servers import RECEIPT_META_KEY
from openfunctions.servers._journaling import ServedJournal, open_execution_journal

from .conftest import journaled_receipts
from .test_http import parse_body, post, rpc


def _hash_call(url: str, text: str) -> dict:
    resp = post(url, rpc("tools/call", {"name": "of_hash_text", "arguments": {"text": text}}), name="of_hash_text")
    return parse_body(resp)["result"]


@pytest.mark.slow
def test_a_full_disk_fails_the_journal_loudly_and_it_reopens_once_writes_succeed(http_server, tmp_path):
    url, proc = http_server("--stateless")
    health = url.rsplit("/", 1)[0] + "/healthz"
    assert _hash_call(url, "before").get("isError") is not True
    journal = tmp_path / "data" / "journal" / "tools.journal"
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    # "The disk is full": the server process may not write past the end of the journal's records (the room the
    # journal reserved after them would still take writes: it is allocated, as on a real full disk).
    records_end = file_stamp(journal)[4]
    assert records_end < journal.stat().st_size  # the room is there
    resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (records_end, hard))
    try:
        refused = _hash_call(url, "while full")
        assert refused["isError"] is True
        text = refused["content"][0]["text"]
        assert "journal" in text and "failed" in text and "restart" in text and "re-open" in text
        sick = httpx.get(health, timeout=30)
        assert sick.status_code == 503
        assert sick.json()["status"] == "failing" and sick.json()["journal"]["status"] == "failed"
        # Still full: calls keep being refused, however often they come.
        assert _hash_call(url, "still full")["isError"] is True
    finally:
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (hard, hard))  # "the disk frees"
    deadline = time.monotonic() + 60
    while httpx.get(health, timeout=30).status_code != 200:
        assert time.monotonic() < deadline, "the journal never re-opened"
        time.sleep(0.5)
    after = _hash_call(url, "after")
    assert after.get("isError") is not True
    receipt_id = after["_meta"][RECEIPT_META_KEY]["receipt_id"]
    assert receipt_id in journaled_receipts(tmp_path / "data")
    verify = subprocess.run([sys.executable, "-m", "openfunctions.servers", "journal", "verify", str(journal)],
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    proc.kill()
    proc.wait(timeout=10)
    err = proc.stderr.read()
    assert "journal_failed" in err and "journal_reopened" in err


class _Flaky:
    """An inner journal whose appends fail while ``broken`` (what a failed JournalLog does)."""

    def __init__(self, path) -> None:
        self.path = path
        self.broken = False
        self.closed = False
        self.records: list = []

    async def on_start(self, record) -> None:
        if self.broken:
            raise JournalFailed("write failed", details={"cause": "[Errno 28] No space left on device"})
        self.records.append(("start", record.receipt_id))

    async def on_settled(self, receipt) -> None:
        if self.broken:
            raise JournalFailed("write failed", details={"cause": "[Errno 28] No space left on device"})
        self.records.append(("receipt", receipt.receipt_id))

    async def close(self) -> None:
        self.closed = True


@pytest.mark.anyio
async def test_no_reopen_while_a_call_from_the_failed_file_still_runs(tmp_path):
    """A re-open settles unsettled starts as unknown: never while their calls still run (they would settle twice)."""
    import anyio

    from openfunctions.core import define_tool

    started, release = anyio.Event(), anyio.Event()

    async def slow(params, ctx):
        started.set()
        await release.wait()
        return {"ok": True}

    (tmp_path / "journal").mkdir(mode=0o700)
    inner = _Flaky(tmp_path / "journal" / "tools.journal")
    served = ServedJournal(inner, data_dir=tmp_path, profile="tools", reopen_interval=0.0)
    registry = ToolRegistry([define_tool(name="slow", description="d", input_schema={"type": "object"}, handler=slow,
                                          capability={"effect": "read", "parallel_safe": True})])
    registry.executor.add_sink(served, first=True)
    results: list = []
    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:

            async def run() -> None:
                results.append(await registry.execute_detailed("slow", {}))

            tg.start_soon(run)
            await started.wait()
            inner.broken = True
            other = await registry.execute_detailed("slow", {})  # its start fails: the journal fails
            assert other.result.is_error and "refuses every write" in other.result.content[0]["text"]
            assert served.failed
            assert await served.try_reopen() is False and not inner.closed  # the slow call still runs
            release.set()
    assert results[0].receipt.outcome == "unknown"  # its receipt could not be written
    assert await served.try_reopen() is True and inner.closed and not served.failed
    assert served.reopened == 1
    try:
        ok = await registry.execute_detailed("slow", {}) if release.is_set() else None
        assert ok is not None and ok.receipt.outcome == "succeeded"
        assert [r.receipt_id for r in served.receipts()] == [ok.receipt.receipt_id]  # the real, re-opened journal
    finally:
        await served.close()


@pytest.mark.anyio
async def test_reopen_interval_none_means_only_a_restart_brings_it_back(tmp_path):
    journal, _ = await open_execution_journal(tmp_path, "tools", reopen_interval=None)
    try:
        journal._fail(JournalFailed("x", details={"cause": "disk full"}))
        assert await journal.try_reopen() is False
        report = await journal.health()
        assert report["status"] == "failed" and "restart" in report["action"]
    finally:
        await journal.close()
