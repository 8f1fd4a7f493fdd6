"""Where a served execution journal syncs (ServedJournal.sync_on_loop), and the removed in-place switch
(``OPENFUNCTIONS_JOURNAL_IN_PLACE``: still accepted, ignored with one warning)."""

from __future__ import annotations

import pytest

from openfunctions.servers._journaling import open_execution_journal

from .conftest import journaled_receipts


@pytest.mark.anyio
async def test_sync_on_loop_reaches_the_log_and_survives_a_reopen(tmp_path):
    served, _ = await open_execution_journal(tmp_path, "tools", watch=False)
    try:
        assert served.log.sync_on_loop is False  # off unless serve_http turns it on
        served.sync_on_loop(True)
        first = served.log
        served.failure = "simulated: the disk refused a write"
        assert await served.try_reopen(force=True) is True
        assert served.log is not first and served.log.sync_on_loop is True
        rec = await served.log.append("probe", {"n": 1})
        assert rec.seq == served.log.last_seq
    finally:
        await served.close()


@pytest.mark.slow
@pytest.mark.parametrize("value", ["1", "0"])
def test_the_removed_in_place_switch_is_ignored_with_a_warning(raw_stdio, tmp_path, value):
    # A configuration written for the old mode must keep starting: the server says the switch is gone
    # and journals every call as usual.
    s = raw_stdio(env={"OPENFUNCTIONS_JOURNAL_IN_PLACE": value})
    s.initialize()
    reply = s.call("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}})
    assert s.close() == 0
    assert reply["result"]["structuredContent"] == {"sum": 3}
    err = bytes(s.stderr)
    assert err.count(b"journal_in_place_removed") == 1, err.decode()[-2000:]
    assert b"OPENFUNCTIONS_JOURNAL_IN_PLACE" in err
    assert any(types[-1] == "receipt" for types in journaled_receipts(tmp_path / "data").values())


@pytest.mark.slow
def test_no_warning_when_the_removed_switch_is_unset(raw_stdio, monkeypatch):
    monkeypatch.delenv("OPENFUNCTIONS_JOURNAL_IN_PLACE", raising=False)
    s = raw_stdio()
    s.initialize()
    assert s.close() == 0
    assert b"journal_in_place_removed" not in bytes(s.stderr)
