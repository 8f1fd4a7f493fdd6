"""A stdio server's execution journal can write a lone appender's record in place (ServedJournal.write_in_place,
OPENFUNCTIONS_JOURNAL_IN_PLACE=1)."""

from __future__ import annotations

import pytest

from openfunctions.servers._journaling import JOURNAL_IN_PLACE_ENV, journal_in_place_enabled, open_execution_journal


@pytest.mark.anyio
async def test_write_in_place_reaches_the_log_and_survives_a_reopen(tmp_path):
    served, _ = await open_execution_journal(tmp_path, "tools", watch=False)
    try:
        assert served.log.inline_when_idle is False  # off unless the runtime turns it on (run_stdio does)
        served.write_in_place(True)
        first = served.log
        assert first.inline_when_idle is True
        served.failure = "simulated: the disk refused a write"
        assert await served.try_reopen(force=True) is True
        assert served.log is not first and served.log.inline_when_idle is True  # the fresh log keeps the choice
        rec = await served.log.append("probe", {"n": 1})
        assert rec.seq == served.log.last_seq
    finally:
        await served.close()


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


@pytest.mark.parametrize(("value", "on"), [(None, False), ("1", True), ("on", True), (" Yes ", True), ("0", False),
                                           ("off", False), ("false", False)])
def test_the_environment_switch(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv(JOURNAL_IN_PLACE_ENV, raising=False)
    else:
        monkeypatch.setenv(JOURNAL_IN_PLACE_ENV, value)
    assert journal_in_place_enabled() is on
