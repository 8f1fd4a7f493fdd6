"""Journal placement: one file per profile in <data-dir>/journal, a second server takes the next slot."""

from __future__ import annotations

import pytest

from openfunctions.servers import _journaling as journaling
from openfunctions.servers.errors import DataDirLocked

from .conftest import RawSession


@pytest.mark.anyio
async def test_second_server_takes_the_next_slot_and_all_slots_held_is_a_clear_error(tmp_path):
    # Real journals: each holds its file's flock (per open file, so a second
    # open in this same process is refused just like another process's).
    opened = []

    async def open_one(profile):
        opened.append(await journaling.open_execution_journal(tmp_path, profile))
        return opened[-1]

    try:
        first = await open_one("tools")
        second = await open_one("tools")
        other_profile = await open_one("work")
        assert first[1] == tmp_path / "journal" / "tools.journal"
        assert second[1] == tmp_path / "journal" / "tools.2.journal"
        assert other_profile[1] == tmp_path / "journal" / "work.journal"
        for _ in range(journaling.MAX_SLOTS - 2):
            await open_one("tools")
        with pytest.raises(DataDirLocked) as info:
            await journaling.open_execution_journal(tmp_path, "tools")
        assert str(tmp_path / "journal") in info.value.message and "--no-journal" in info.value.message
    finally:
        for journal, _ in opened:
            await journal.close()


@pytest.mark.slow
def test_every_call_is_journaled_and_two_servers_share_a_data_dir(tmp_path):
    from openfunctions.core.journal import read_records

    data = tmp_path / "data"
    a = RawSession(data_dir=data)
    b = RawSession(data_dir=data)
    try:
        for s in (a, b):
            s.initialize()
        ra = a.call("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
        rb = b.call("tools/call", {"name": "add", "arguments": {"a": 3, "b": 4}})
        assert a.close() == 0 and b.close() == 0
    finally:
        a.kill()
        b.kill()
    files = sorted(p.name for p in (data / "journal").iterdir() if p.suffix == ".journal")
    assert files == ["tools.2.journal", "tools.journal"]
    ids = {ra["result"]["_meta"]["dev.openfunctions/receipt"]["receipt_id"],
           rb["result"]["_meta"]["dev.openfunctions/receipt"]["receipt_id"]}
    journaled = set()
    for f in files:
        for rec in read_records(data / "journal" / f):
            rid = (rec.data or {}).get("receipt_id")
            if rid:
                journaled.add(rid)
    assert ids <= journaled


def test_no_journal_writes_nothing(tmp_path):
    data = tmp_path / "data"
    s = RawSession("--no-journal", data_dir=data)
    try:
        s.initialize()
        s.call("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
        assert s.close() == 0
    finally:
        s.kill()
    assert not (data / "journal").exists() or not any((data / "journal").iterdir())


@pytest.mark.anyio
async def test_a_journal_over_the_limit_at_startup_continues_in_a_new_segment(tmp_path, monkeypatch):
    from openfunctions.core.journal import read_records, segment_paths

    monkeypatch.setattr(journaling, "ROTATE_BYTES", 600)
    journal, path = await journaling.open_execution_journal(tmp_path, "tools")
    await journal.log.append("note", {"pad": "x" * 700})  # a real journal, now over the limit
    await journal.close()

    journal, path2 = await journaling.open_execution_journal(tmp_path, "tools")
    try:
        assert path2 == path and journal.rotated_to == segment_paths(path)[0]
        assert journal.log.last_seq == 0
        assert [r.type for r in read_records(journal.rotated_to)] == ["note"]
    finally:
        await journal.close()
