"""Journal placement: one file per profile in <data-dir>/journal, a second server takes the next slot."""

from __future__ import annotations

import sys

import pytest

from openfunctions.core.errors import JournalLocked
from openfunctions.servers import journaling
from openfunctions.servers.errors import DataDirLocked

from .conftest import RawSession

needs_journal = pytest.mark.skipif(not journaling.journal_available(), reason="openfunctions.core.journal not merged into this build yet")


class _FakeJournalModule:
    """Stands in for the journal module to exercise the slot choice alone (lock held by path)."""

    held: set = set()

    class ExecutionJournal:
        @classmethod
        async def open(cls, path):
            if path in _FakeJournalModule.held:
                raise JournalLocked(f"{path} is locked")
            _FakeJournalModule.held.add(path)
            return ("journal", path)


@pytest.mark.anyio
async def test_second_server_takes_the_next_slot_and_all_slots_held_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "openfunctions.core.journal", _FakeJournalModule)
    _FakeJournalModule.held = set()
    first = await journaling.open_execution_journal(tmp_path, "tools")
    second = await journaling.open_execution_journal(tmp_path, "tools")
    other_profile = await journaling.open_execution_journal(tmp_path, "work")
    assert first[1] == tmp_path / "journal" / "tools.journal"
    assert second[1] == tmp_path / "journal" / "tools.2.journal"
    assert other_profile[1] == tmp_path / "journal" / "work.journal"
    for _ in range(journaling.MAX_SLOTS - 2):
        await journaling.open_execution_journal(tmp_path, "tools")
    with pytest.raises(DataDirLocked) as info:
        await journaling.open_execution_journal(tmp_path, "tools")
    assert str(tmp_path / "journal") in info.value.message and "--no-journal" in info.value.message


@needs_journal
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


@needs_journal
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
