"""The conversation table as a core record stream: a table written by the previous code still reads, the live fold
equals the fold replayed from disk, and a record type this version does not know refuses the table.

The fixtures (tests/fixtures/records_v1/conversations*) were written by ``Conversations`` from before the port,
with the table each folded to beside it (``expected.json``).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.chat import ChatConfigError
from openfunctions.chat._conversations import CONVERSATIONS, Conversations, log_path
from openfunctions.core.journal import JournalLog, read_records, segment_paths
from openfunctions.core.records import UnknownRecords, replay

from .._datadirs import copy_data_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1"

pytestmark = pytest.mark.anyio

Row = list[object]


def rows(table: Conversations) -> list[Row]:
    return [[c.id, c.thread_id, c.principal] for c in table.held()]


def replayed(path: Path) -> list[Row]:
    """What a lock-free reader folds from the files."""
    return [[c.id, c.thread_id, c.principal] for c in replay(CONVERSATIONS, path).state.values()]


@pytest.mark.parametrize("name", ["conversations", "conversations_compacted", "conversations_crashed"])
async def test_a_table_written_by_the_previous_code_reads_to_the_same_conversations(tmp_path: Path, name: str) -> None:
    data = copy_data_dir(FIXTURES / name, tmp_path / "data")
    expected = json.loads((data / "expected.json").read_text())
    path = log_path(data, "helpdesk")
    assert replayed(path) == expected["rows"]
    table = await Conversations.open(path, expected["limit"], agent="helpdesk")
    try:
        assert rows(table) == expected["rows"]
        first = table.held()[0]
        assert table.get(first.id, principal=first.principal) is first  # still bound to its creator
        await table.used(first)  # the least recently used becomes the most recently used
        new = await table.issue("bob")  # past the bound: the least recently used now goes
        live = rows(table)
        assert live == [*expected["rows"][2:], expected["rows"][0], [new.id, new.thread_id, "bob"]]
        async with table._lock:
            await table._compact()  # the core record stream's compaction of a file the previous code wrote
        assert rows(table) == live and segment_paths(path) == []
    finally:
        await table.close()
    assert replayed(path) == live
    reopened = await Conversations.open(path, expected["limit"], agent="helpdesk")
    assert rows(reopened) == live
    await reopened.close()
    assert [r.type for r in read_records(path)][-2:] == ["snapshot", "compacted"]


async def test_a_record_type_this_version_does_not_know_refuses_the_table(tmp_path: Path) -> None:
    assert CONVERSATIONS.unknown is UnknownRecords.REFUSE
    path = log_path(tmp_path, "chat")
    table = await Conversations.open(path, 5, agent="chat")
    conv = await table.issue("p")
    await table.close()
    log = await JournalLog.open(path)
    await log.append("rebound", {"id": conv.id, "principal": "someone else"})  # a newer version's record
    await log.close()
    before = path.read_bytes()
    with pytest.raises(ChatConfigError, match=r"conversation table .*chat\.conversations\.journal.*record 2 "
                                              r"\('rebound'\).*unknown record type 'rebound'"):
        await Conversations.open(path, 5, agent="chat")
    with pytest.raises(ChatConfigError, match="unknown record type 'rebound'"):
        replay(CONVERSATIONS, path)
    assert path.read_bytes() == before  # nothing rewritten: the next version still reads it


async def test_a_compaction_keeps_the_conversation_objects_turns_in_flight_hold(tmp_path: Path) -> None:
    path = log_path(tmp_path, "chat")
    table = await Conversations.open(path, 5, agent="chat")
    conv = await table.issue("p")
    conv.busy += 1  # a turn is running on it: it holds this object (its lock, its busy count)
    async with table._lock:
        await table._compact()
    assert table.get(conv.id) is conv
    thread = await table.reset(conv)  # the running turn's object is still the table's
    assert conv.thread_id == thread and rows(table) == replayed(path)
    await table.close()


# -- live vs replay ----------------------------------------------------------------------------

OPS = st.lists(st.one_of(
    st.tuples(st.just("issue"), st.sampled_from(["a", "b", None])),
    st.tuples(st.just("used"), st.integers(0, 5)),
    st.tuples(st.just("reset"), st.integers(0, 5)),
    st.tuples(st.just("compact"), st.just(None)),
    st.tuples(st.just("reopen"), st.just(None)),
), max_size=20)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 3), OPS)
def test_the_live_table_equals_the_table_replayed_from_disk(limit: int, ops: list[tuple[str, object]]) -> None:
    async def main(path: Path) -> None:
        table = await Conversations.open(path, limit, agent="t")
        try:
            for op, arg in ops:
                held = table.held()
                if op == "issue":
                    await table.issue(arg if isinstance(arg, str) else None)
                elif op in ("used", "reset") and held:
                    conv = held[int(arg) % len(held)]  # type: ignore[call-overload]
                    await (table.used(conv) if op == "used" else table.reset(conv))
                elif op == "compact":
                    async with table._lock:
                        await table._compact()
                elif op == "reopen":
                    await table.close()
                    table = await Conversations.open(path, limit, agent="t")
                assert replayed(path) == rows(table)
                assert len(table) <= limit
        finally:
            await table.close()

    with tempfile.TemporaryDirectory() as d:
        anyio.run(main, log_path(Path(d), "t"))
