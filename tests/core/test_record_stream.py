"""The core record stream (core/records): one fold live and at replay, one unknown-record policy, one compaction.

A toy stream of counters stands for every domain's: ``set``/``add``/``del`` records keyed by ``k``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.core.journal import JournalLog, read_records, segment_paths
from openfunctions.core.records import (
    COMPACTED,
    Entry,
    FileRecordLog,
    RecordMalformed,
    RecordStream,
    UnknownRecords,
    UnknownRecordType,
    _file,
    replay,
)

pytestmark = pytest.mark.anyio


def _apply(state: dict[str, int], rec: Any) -> None:
    k = rec.data["k"]
    if not isinstance(k, str):
        raise TypeError("k must be a string")
    if rec.type == "set":
        state[k] = int(rec.data["v"])
    elif rec.type == "add":
        state[k] = state.get(k, 0) + int(rec.data["v"])
    else:
        state.pop(k, None)


def counters(unknown: UnknownRecords = UnknownRecords.KEEP, keep_segments: bool = False) -> RecordStream[dict[str, int]]:
    return RecordStream("counters", kind="counters", types={"set", "add", "del"}, new_state=dict, apply=_apply,
                        unknown=unknown, meta={"format": "test.counters", "version": 1},
                        snapshot=lambda s: [("set", {"k": k, "v": v}) for k, v in s.items()],
                        keep_segments=keep_segments)


def test_the_fold_applies_known_records_and_refuses_or_keeps_the_unknown_by_policy():
    recs = [Entry("set", {"k": "a", "v": 1}), Entry("add", {"k": "a", "v": 2}), Entry("future", {"x": 1}),
            Entry(COMPACTED, {"segments": []})]
    kept: list[Any] = []
    assert counters().fold(recs, unknown=kept) == {"a": 3}
    assert [r.type for r in kept] == ["future"]  # not folded, not dropped: listed
    with pytest.raises(UnknownRecordType, match="unknown record type 'future'") as exc:
        counters(UnknownRecords.REFUSE).fold(recs)
    assert exc.value.code == "record_type_unknown" and exc.value.details["stream"] == "counters"
    with pytest.raises(RecordMalformed, match=r"record seq 0 \('set'\) in 'here' cannot be folded: KeyError"):
        counters().fold([Entry("set", {"k": "a"})], where="here")
    with pytest.raises(ValueError, match="compaction's record"):
        RecordStream("x", kind="x", types={COMPACTED}, new_state=dict, apply=_apply, unknown=UnknownRecords.KEEP)


async def test_a_stream_opens_appends_and_replays_to_the_same_state(tmp_path):
    path = tmp_path / "c.journal"
    log = await FileRecordLog.open(counters(), path)
    await log.append("set", {"k": "a", "v": 5})
    await log.append_many([("add", {"k": "a", "v": 1}), ("set", {"k": "b", "v": 2}), ("del", {"k": "b"})])
    assert log.state == {"a": 6}
    assert replay(counters(), path).state == {"a": 6}  # lock-free, beside the live writer
    await log.close()
    again = await FileRecordLog.open(counters(), path)
    assert again.state == {"a": 6} and again.header_meta["format"] == "test.counters"
    await again.close()
    assert replay(counters(), tmp_path / "absent.journal").state == {}


async def test_an_unknown_record_of_a_newer_writer_survives_an_older_readers_compaction(tmp_path):
    path = tmp_path / "c.journal"
    raw = await JournalLog.open(path, kind="counters", meta={"format": "test.counters", "version": 1})
    await raw.append_many([("set", {"k": "a", "v": 1}), ("future", {"k": "a", "why": "newer"})])
    await raw.close()
    log = await FileRecordLog.open(counters(), path)
    assert log.state == {"a": 1} and [(r.type, r.data) for r in log.unknown] == [("future", {"k": "a", "why": "newer"})]
    await log.append("add", {"k": "a", "v": 1})
    done = await log.compact(kept=1)
    assert done.info == {"kept": 1} and segment_paths(path) == []
    await log.close()
    after = replay(counters(), path)
    assert after.state == {"a": 2} and [(r.type, r.data) for r in after.unknown] == [("future", {"k": "a", "why": "newer"})]
    # a stream that refuses them does not open the file, names it, and writes nothing
    size = os.path.getsize(path)
    with pytest.raises(UnknownRecordType, match="unknown record type 'future'"):
        await FileRecordLog.open(counters(UnknownRecords.REFUSE), path)
    assert os.path.getsize(path) == size


async def test_a_compaction_keeps_what_its_caller_keeps_and_the_live_state_is_what_was_written(tmp_path):
    path = tmp_path / "c.journal"
    log = await FileRecordLog.open(counters(), path)
    await log.append_many([("set", {"k": k, "v": i}) for i, k in enumerate("abcd")])
    done = await log.compact([("set", {"k": "c", "v": 2}), ("set", {"k": "d", "v": 3})], kept=2, pruned=2)
    assert log.state == {"c": 2, "d": 3} == replay(counters(), path).state
    types = [r.type for r in read_records(path)]
    assert types == ["set", "set", COMPACTED] and done.segments == ("c.journal.seg-000001",)
    marker = list(read_records(path))[-1].data
    assert marker == {"kept": 2, "pruned": 2, "segments": ["c.journal.seg-000001"]}
    await log.close()


async def test_a_crash_after_the_rotation_and_before_the_snapshot_loses_nothing(tmp_path):
    path = tmp_path / "c.journal"
    log = await FileRecordLog.open(counters(), path)
    await log.append_many([("set", {"k": "a", "v": 1}), ("set", {"k": "b", "v": 2})])
    await log.compact()  # a first compaction: its segment is gone, its snapshot is in the file
    await log.append("add", {"k": "a", "v": 10})
    await log.log.rotate(meta=counters().meta)  # the second one's rotation, then the process dies
    await log.close()
    assert len(segment_paths(path)) == 1  # the rotated file, holding the first snapshot and the add
    assert replay(counters(), path).state == {"a": 11, "b": 2}
    again = await FileRecordLog.open(counters(), path)
    assert again.state == {"a": 11, "b": 2}
    await again.compact()
    assert segment_paths(path) == [] and replay(counters(), path).state == {"a": 11, "b": 2}
    await again.close()


async def test_a_crash_before_the_segments_are_deleted_does_not_bring_dropped_records_back(tmp_path, monkeypatch):
    path = tmp_path / "c.journal"
    log = await FileRecordLog.open(counters(), path)
    await log.append_many([("set", {"k": "a", "v": 1}), ("set", {"k": "gone", "v": 2})])
    monkeypatch.setattr(_file, "_unlink", lambda p: None)  # the process dies before deleting the segment
    await log.compact([("set", {"k": "a", "v": 1})])
    await log.close()
    monkeypatch.undo()
    assert len(segment_paths(path)) == 1
    assert replay(counters(), path).state == {"a": 1}  # the segment is superseded: "gone" stays gone
    again = await FileRecordLog.open(counters(), path)  # the writer finishes the compaction's cleanup
    assert again.state == {"a": 1} and segment_paths(path) == []
    await again.close()


async def test_a_stream_that_keeps_its_segments_still_replays_only_the_last_compaction(tmp_path):
    path = tmp_path / "c.journal"
    stream = counters(keep_segments=True)
    log = await FileRecordLog.open(stream, path)
    await log.append("set", {"k": "old", "v": 1})
    await log.compact([])
    await log.append("set", {"k": "new", "v": 1})
    await log.compact()
    await log.close()
    assert len(segment_paths(path)) == 2  # history, still verifiable journals
    assert replay(stream, path).state == {"new": 1}


async def test_an_older_writers_compacted_header_supersedes_its_segments(tmp_path):
    # Older task stores compacted by rotating with meta {"compacted": true} and re-writing into the new file.
    path = tmp_path / "c.journal"
    raw = await JournalLog.open(path, kind="counters")
    await raw.append("set", {"k": "expired", "v": 1})
    await raw.rotate(meta={"compacted": True})
    await raw.append("set", {"k": "live", "v": 1})
    await raw.close()
    assert replay(counters(), path).state == {"live": 1}


async def test_an_older_writers_compaction_that_crashed_after_its_rotation_still_reads_its_segment(tmp_path):
    path = tmp_path / "c.journal"
    raw = await JournalLog.open(path, kind="counters")
    await raw.append("set", {"k": "a", "v": 1})
    await raw.rotate(meta={"compacted": True})  # flagged, then the process died before re-writing anything
    await raw.close()
    assert replay(counters(), path).state == {"a": 1}


# -- live vs replay, for random record sequences ---------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "d"])
OPS = st.one_of(
    st.tuples(st.just("set"), KEYS, st.integers(-5, 5)),
    st.tuples(st.just("add"), KEYS, st.integers(-5, 5)),
    st.tuples(st.just("del"), KEYS, st.just(0)),
    st.tuples(st.just("future"), KEYS, st.just(0)),  # a newer writer's record: kept, not folded
    st.tuples(st.just("compact"), KEYS, st.just(0)),  # retention: drop that key
    st.tuples(st.just("reopen"), KEYS, st.just(0)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, max_size=30), st.booleans())
def test_live_state_equals_replayed_state_for_random_record_sequences(ops, keep_segments):
    stream = counters(keep_segments=keep_segments)

    async def main(path: Path) -> None:
        log = await FileRecordLog.open(stream, path)
        try:
            for op, k, v in ops:
                if op == "compact":
                    await log.compact([(t, d) for t, d in stream.snapshot(log.state) if d["k"] != k])
                elif op == "reopen":
                    await log.close()
                    log = await FileRecordLog.open(stream, path)
                elif op == "future":
                    await log.log.append("future", {"k": k})  # as a newer writer would
                    log.unknown.append(list(log.log.records(after_seq=log.log.last_seq - 1))[0])
                else:
                    await log.append(op, {"k": k, "v": v})
                again = replay(stream, path)
                assert again.state == log.state
                assert [(r.type, r.data) for r in again.unknown] == [(r.type, r.data) for r in log.unknown]
        finally:
            await log.close()
        reopened = await FileRecordLog.open(stream, path)
        assert reopened.state == log.state
        await reopened.close()

    with tempfile.TemporaryDirectory() as d:
        anyio.run(main, Path(d) / "c.journal")


async def test_a_compacted_record_with_malformed_segment_names_deletes_no_segment(tmp_path):
    path = tmp_path / "c.journal"
    raw = await JournalLog.open(path, kind="counters")
    await raw.append("set", {"k": "old", "v": 1})
    await raw.rotate()
    await raw.append_many([("set", {"k": "a", "v": 1}), (COMPACTED, {"segments": 5})])
    await raw.close()
    assert replay(counters(), path).state == {"a": 1}  # the compacted record still supersedes what came before
    log = await FileRecordLog.open(counters(), path)
    assert log.state == {"a": 1} and len(segment_paths(path)) == 1  # but names no segment to delete
    await log.close()


async def test_a_lock_free_replay_reads_again_when_a_compaction_rotates_the_file_under_it(tmp_path, monkeypatch):
    path = tmp_path / "c.journal"
    log = await FileRecordLog.open(counters(), path)
    await log.append_many([("add", {"k": "a", "v": 1}), ("add", {"k": "a", "v": 1})])
    await log.close()
    fresh = tmp_path / "fresh.journal"
    await (await JournalLog.open(fresh, kind="counters")).close()
    listed = segment_paths

    def rotate_once_then_list(p):
        # a writer's rotation, right after the reader read the file and before it lists the segments
        if not listed(p):
            os.rename(path, f"{path}.seg-000001")
            os.rename(fresh, path)
        return listed(p)

    monkeypatch.setattr(_file, "segment_paths", rotate_once_then_list)
    assert replay(counters(), path).state == {"a": 2}  # not 4: the rotated file is not folded twice


async def test_a_stream_kept_as_one_file_per_writer_folds_its_files_in_order_onto_one_state(tmp_path):
    """``state=``: each writer's file is opened onto the fold of the files before it, as the work attempt
    journal keeps one file per lease generation; such a log refuses to compact."""
    from openfunctions.core.records import RecordStreamError

    stream = counters(UnknownRecords.REFUSE)
    first = await FileRecordLog.open(stream, tmp_path / "g1")
    await first.append("set", {"k": "a", "v": 1})
    await first.close()
    earlier = replay(stream, tmp_path / "g1").state
    second = await FileRecordLog.open(stream, tmp_path / "g2", state=earlier)
    assert second.state is earlier  # the log holds and updates the caller's state
    await second.append("add", {"k": "a", "v": 2})
    assert second.state == {"a": 3}
    with pytest.raises(RecordStreamError, match="does not compact"):
        await second.compact()
    await second.close()
    assert replay(stream, tmp_path / "g2").state == {"a": 2}  # the second file alone misses the first's set
    third = await FileRecordLog.open(stream, tmp_path / "g2", state=replay(stream, tmp_path / "g1").state)
    assert third.state == {"a": 3}  # reopened: the file's own records fold onto the state given
    await third.close()
