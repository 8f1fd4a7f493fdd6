"""Segments: a journal that outgrew its size closes as a segment and continues in a fresh file."""

from __future__ import annotations

import json
import os

import pytest

from openfunctions.core.journal import ExecutionJournal, JournalLog, read_records, recovered_receipt, segment_paths
from openfunctions.core.journal.cli import main as journal_cli

pytestmark = pytest.mark.anyio


def _start(i: int) -> dict:
    return {
        "v": 1, "receipt_id": f"rcpt_{i}", "tool": "t", "spec_sha256": None, "params_sha256": None,
        "started_at": "2026-11-30T00:00:00.000000Z", "principal": None, "parent_receipt_id": None,
    }


async def test_rotate_keeps_the_old_file_as_a_complete_segment_and_links_the_new_one(tmp_path):
    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p, kind="log")
    for i in range(5):
        last = await log.append("t", {"i": i})
    old_id = log.journal_id
    segment = await log.rotate(meta={"why": "test"})
    assert segment == tmp_path / "j.jsonl.seg-000001"
    assert log.last_seq == 0 and log.journal_id != old_id
    prev = log.header.meta["previous"]
    assert prev == {"file": segment.name, "journal_id": old_id, "last_seq": 5, "last_link": last.checksum}
    assert log.header.meta["why"] == "test" and log.header.kind == "log"
    rec = await log.append("t", {"i": 5})
    assert rec.seq == 1
    await log.close()
    assert [r.data["i"] for r in read_records(segment)] == [0, 1, 2, 3, 4]
    assert [r.data["i"] for r in read_records(p)] == [5]
    assert journal_cli(["verify", str(segment)]) == 0 and journal_cli(["verify", str(p)]) == 0
    # Reopening continues the new segment; a second rotation takes the next number.
    log = await JournalLog.open(p)
    assert log.last_seq == 1
    assert (await log.rotate()).name == "j.jsonl.seg-000002"
    await log.close()
    assert segment_paths(p) == [tmp_path / "j.jsonl.seg-000001", tmp_path / "j.jsonl.seg-000002"]


async def test_execution_journal_rotates_after_recovery_and_reads_receipts_across_segments(tmp_path):
    p = tmp_path / "exec.jsonl"
    log = await JournalLog.open(p, kind="execution")
    for i in range(3):
        await log.append("start", _start(i))
    await log.append("receipt", recovered_receipt(_start(1)).to_dict())  # rcpt_1 settled
    await log.close()
    size = os.path.getsize(p)

    j = await ExecutionJournal.open(p, rotate_over=size - 1)
    # Recovery wrote its receipts into the old file first, then the file rotated:
    # the unsettled starts and their recovered receipts stay together.
    assert [r.receipt_id for r in j.recovered] == ["rcpt_0", "rcpt_2"]
    assert j.rotated_to == tmp_path / "exec.jsonl.seg-000001"
    seg = list(read_records(j.rotated_to))
    assert [r.type for r in seg] == ["start", "start", "start", "receipt", "receipt", "receipt"]
    assert j.log.last_seq == 0
    assert [r.receipt_id for r in j.receipts()] == ["rcpt_1", "rcpt_0", "rcpt_2"]  # read from the segment
    rec = await j.log.append("receipt", recovered_receipt(_start(3)).to_dict())
    assert rec.seq == 1
    assert [r.receipt_id for r in j.receipts()] == ["rcpt_1", "rcpt_0", "rcpt_2", "rcpt_3"]  # segments, then the live file
    await j.close()

    # The next open has nothing to recover and, being small, does not rotate.
    j = await ExecutionJournal.open(p, rotate_over=size - 1)
    assert j.recovered == [] and j.rotated_to is None
    await j.close()


async def test_small_journals_and_rotate_over_none_never_rotate(tmp_path):
    p = tmp_path / "exec.jsonl"
    j = await ExecutionJournal.open(p)
    await j.log.append("receipt", recovered_receipt(_start(0)).to_dict())
    await j.close()
    j = await ExecutionJournal.open(p)  # default limit: a small journal stays as it is
    assert j.rotated_to is None
    await j.close()
    j = await ExecutionJournal.open(p, rotate_over=None)  # any size: None never rotates
    assert j.rotated_to is None and j.log.last_seq == 1
    await j.close()
    assert segment_paths(p) == []
    j = await ExecutionJournal.open(p, rotate_over=1)  # the same file does rotate past a real limit
    assert j.rotated_to is not None
    await j.close()


async def test_a_crash_between_the_rename_and_the_new_file_loses_nothing(tmp_path):
    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p)
    await log.append("t", {"i": 0})
    await log.close()
    # What a crash right after the rename leaves: the segment, and no file at the path.
    os.rename(p, tmp_path / "j.jsonl.seg-000001")
    log = await JournalLog.open(p)  # a fresh journal, no 'previous' link
    assert log.last_seq == 0 and "previous" not in log.header.meta
    await log.close()
    assert [r.data for r in read_records(tmp_path / "j.jsonl.seg-000001")] == [{"i": 0}]


async def test_rotate_waits_for_queued_appends(tmp_path):
    import anyio

    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p)
    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(log.append, "t", {"i": i})
        await anyio.sleep(0)  # all twenty are queued
        segment = await log.rotate()
    await log.close()
    assert [r.data["i"] for r in read_records(segment)] == list(range(20))
    assert json.loads(p.read_text().splitlines()[0])["meta"]["previous"]["last_seq"] == 20


async def test_inspect_names_the_segments_and_the_previous_link(tmp_path, capsys):
    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p)
    await log.append("t", {})
    await log.rotate()
    await log.close()
    capsys.readouterr()
    assert journal_cli(["inspect", "--json", str(p)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["segments"] == ["j.jsonl.seg-000001"]
    assert info["previous"]["file"] == "j.jsonl.seg-000001" and info["previous"]["last_seq"] == 1
    assert journal_cli(["inspect", str(p)]) == 0
    out = capsys.readouterr().out
    assert "segments  1 finished: j.jsonl.seg-000001" in out and "previous  segment j.jsonl.seg-000001" in out
