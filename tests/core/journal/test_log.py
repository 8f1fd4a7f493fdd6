"""JournalLog basics: create, append (group commit), reopen, records, lock, repair."""

from __future__ import annotations

import itertools
import json
import os
import stat
import threading

import anyio
import pytest

from openfunctions.core.errors import NonJsonValue
from openfunctions.core.journal import (
    JournalClosed,
    JournalLocked,
    JournalLog,
    JournalMismatch,
    read_records,
)
from openfunctions.core.journal._fsutil import FileOps

from .._helpers import until

pytestmark = pytest.mark.anyio


async def test_create_append_reopen(tmp_path):
    p = tmp_path / "sub" / "j.jsonl"
    log = await JournalLog.open(p, kind="log")
    assert log.last_seq == 0
    r1 = await log.append("a", {"x": 1})
    r2 = await log.append("b", {"y": "ü"})
    assert (r1.seq, r2.seq) == (1, 2)
    assert r2.prev == r1.checksum
    assert log.last_seq == 2
    await log.close()
    assert stat.S_IMODE(os.stat(p.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600

    log = await JournalLog.open(p)
    assert log.last_seq == 2
    assert [(r.seq, r.type, r.data) for r in log.records()] == [(1, "a", {"x": 1}), (2, "b", {"y": "ü"})]
    r3 = await log.append("c", {})
    assert r3.seq == 3 and r3.prev == r2.checksum
    await log.close()
    assert [r.seq for r in read_records(p)] == [1, 2, 3]
    lines = p.read_bytes().split(b"\n")
    assert json.loads(lines[0])["format"] == "openfunctions.journal"
    assert lines[-1] == b""


async def test_concurrent_appends_are_ordered_and_share_fsyncs(tmp_path):
    class CountingOps(FileOps):
        syncs = 0

        def sync(self, fd):
            CountingOps.syncs += 1
            super().sync(fd)

    log = await JournalLog.open(tmp_path / "j.jsonl", _ops=CountingOps())
    got: list[int] = []

    async def one(i: int) -> None:
        rec = await log.append("t", {"i": i})
        assert rec.data == {"i": i}
        got.append(rec.seq)

    async with anyio.create_task_group() as tg:
        for i in range(200):
            tg.start_soon(one, i)
    assert sorted(got) == list(range(1, 201))
    # Appends started in one loop tick share batches: far fewer fsyncs than records.
    assert CountingOps.syncs < 200
    recs = list(log.records())
    assert [r.seq for r in recs] == list(range(1, 201))
    # seq order is call order: task i was started i-th.
    assert [r.data["i"] for r in recs] == list(range(200))
    await log.close()


async def test_append_returns_only_after_sync(tmp_path):
    synced_lines: list[int] = []

    class RecordingOps(FileOps):
        def sync(self, fd):
            super().sync(fd)
            synced_lines.append(os.fstat(fd).st_size)

    log = await JournalLog.open(tmp_path / "j.jsonl", _ops=RecordingOps())
    rec = await log.append("t", {"k": "v"})
    assert synced_lines and synced_lines[-1] >= rec.offset + 1
    assert log.size == synced_lines[-1]
    await log.close()


async def test_bad_data_is_refused_without_consuming_a_seq(tmp_path):
    log = await JournalLog.open(tmp_path / "j.jsonl")
    with pytest.raises(NonJsonValue):
        await log.append("t", {"x": float("nan")})
    with pytest.raises(NonJsonValue):
        await log.append("t", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        await log.append("", {})
    assert (await log.append("t", {})).seq == 1
    await log.close()
    with pytest.raises(JournalClosed):
        await log.append("t", {})


async def test_second_open_in_process_is_locked_then_free_after_close(tmp_path):
    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p)
    with pytest.raises(JournalLocked) as ei:
        await JournalLog.open(p)
    assert ei.value.details["pid"] == os.getpid()
    await log.close()
    log2 = await JournalLog.open(p)
    await log2.close()


async def test_torn_tail_is_saved_and_cut(tmp_path):
    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p)
    await log.append("t", {"i": 1})
    await log.close()
    good = p.read_bytes()
    with open(p, "ab") as f:
        f.write(b'{"chk":"0123')
    log = await JournalLog.open(p)
    assert log.repaired_tail is not None
    assert log.repaired_tail.read_bytes() == b'{"chk":"0123'
    assert p.read_bytes() == good
    assert (await log.append("t", {"i": 2})).seq == 2
    await log.close()


async def test_kind_mismatch(tmp_path):
    p = tmp_path / "j.jsonl"
    await (await JournalLog.open(p, kind="execution")).close()
    with pytest.raises(JournalMismatch):
        await JournalLog.open(p, kind="attempt")


def test_encoded_record_is_canonical_json():
    from openfunctions.core import canonical_json
    from openfunctions.core.journal._encoder import encode_record

    for data, type_ in [({"b": 1, "a": [1.5, None, "é\u2028"]}, "t"), ({}, 'q"uo\\te\n'), ({"z": {"y": True}}, "ü")]:
        line, chk = encode_record(7, type_, "2026-01-01T00:00:00.000000Z", data, "p" * 32)
        full = {"chk": chk, "data": data, "prev": "p" * 32, "seq": 7, "time": "2026-01-01T00:00:00.000000Z", "type": type_}
        assert line == canonical_json(full).encode("utf-8") + b"\n"


async def test_cancelled_appender_does_not_disturb_its_batch(tmp_path):
    victim_returned = anyio.Event()
    release = threading.Event()

    class GatedOps(FileOps):
        def sync(self, fd):
            gate_entered_flag.append(1)
            release.wait(30)
            super().sync(fd)

    gate_entered_flag: list[int] = []
    log = await JournalLog.open(tmp_path / "j.jsonl", _ops=GatedOps())
    results: dict[int, int] = {}

    async def one(i: int) -> None:
        results[i] = (await log.append("t", {"i": i})).seq

    victim_scope = anyio.CancelScope()

    async def victim() -> None:
        with victim_scope:
            await log.append("t", {"i": "victim"})
        victim_returned.set()

    async with anyio.create_task_group() as tg:

        tg.start_soon(one, 0)
        tg.start_soon(victim)
        tg.start_soon(one, 1)
        await until(lambda: bool(gate_entered_flag))  # the batch is in its fsync
        victim_scope.cancel()
        await victim_returned.wait()  # the victim returned (cancelled) while the fsync still runs
        release.set()
    assert results == {0: 1, 1: 3}
    await log.close()
    # The cancelled caller got no ack, but its queued record was written in order.
    assert [r.data["i"] for r in read_records(tmp_path / "j.jsonl")] == [0, "victim", 1]


async def test_close_waits_for_queued_appends(tmp_path):
    log = await JournalLog.open(tmp_path / "j.jsonl")
    acked: list[int] = []

    async def one(i):
        acked.append((await log.append("t", {"i": i})).seq)

    async with anyio.create_task_group() as tg:
        for i in range(10):
            tg.start_soon(one, i)
        await anyio.sleep(0)  # all ten are queued
        await log.close()
    assert sorted(acked) == list(range(1, 11))
    assert len(list(read_records(tmp_path / "j.jsonl"))) == 10


async def test_a_dropped_log_frees_its_lock_and_a_failed_open_frees_everything(tmp_path):
    import gc

    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p)
    await log.append("t", {})
    del log
    gc.collect()
    log = await JournalLog.open(p)  # not JournalLocked
    await log.close()
    with pytest.raises(JournalMismatch) as failed:
        await JournalLog.open(p, kind="attempt")
    # ``failed`` keeps the failed open's frames (and its half-built log)
    # alive, so no __del__ can have run: only the error path's own cleanup
    # can have released the lock for this reopen.
    await (await JournalLog.open(p)).close()
    assert failed.value.code == "journal_mismatch"


@pytest.mark.anyio
async def test_lone_surrogate_in_data_is_refused_without_consuming_a_seq(tmp_path):
    import json as _json

    from openfunctions.core import NonJsonValue

    log = await JournalLog.open(tmp_path / "j.journal")
    try:
        with pytest.raises(NonJsonValue, match="surrogate"):
            await log.append("t", _json.loads('{"s": "\\ud800"}'))
        rec = await log.append("t", {"s": "fine"})
        assert rec.seq == 1
    finally:
        await log.close()


@pytest.mark.anyio
async def test_header_meta_with_a_lone_surrogate_is_non_json_and_creates_no_journal(tmp_path):
    import json as _json

    p = tmp_path / "m.jsonl"
    with pytest.raises(NonJsonValue, match="surrogate"):
        await JournalLog.open(p, meta=_json.loads('{"who": "\\udc80"}'))
    assert not p.exists()
    await (await JournalLog.open(p, meta={"who": "ok"})).close()


async def test_append_many_is_one_group_with_one_fsync(tmp_path):
    class CountingOps(FileOps):
        syncs = 0

        def sync(self, fd):
            CountingOps.syncs += 1
            super().sync(fd)

    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p, _ops=CountingOps())
    first = await log.append("t", {"i": 0})
    assert await log.append_many([]) == []
    assert CountingOps.syncs == 1  # an empty group writes nothing
    recs = await log.append_many([("t", {"i": i}) for i in range(1, 6)])
    assert CountingOps.syncs == 2
    assert [r.seq for r in recs] == [2, 3, 4, 5, 6]
    assert recs[0].prev == first.checksum and all(b.prev == a.checksum for a, b in itertools.pairwise(recs))
    assert log.last_seq == 6 and log.size == os.path.getsize(p)
    after = await log.append("t", {"i": 6})
    assert after.seq == 7 and after.prev == recs[-1].checksum
    await log.close()
    on_disk = list(read_records(p))
    assert [r.data["i"] for r in on_disk] == list(range(7))
    # What append_many returned is what the decoder reads back.
    assert [tuple(r) for r in on_disk[1:6]] == [tuple(r) for r in recs]


async def test_append_many_refuses_the_whole_group_before_queueing_anything(tmp_path):
    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p)
    with pytest.raises(NonJsonValue, match=r"\$\.bad"):
        await log.append_many([("t", {"i": 1}), ("t", {"bad": float("inf")}), ("t", {"i": 3})])
    with pytest.raises(ValueError):
        await log.append_many([("t", {}), ("", {})])
    assert (await log.append("t", {"i": 1})).seq == 1  # no seq was consumed
    await log.close()
    assert len(list(read_records(p))) == 1


async def test_append_many_and_append_interleave_in_call_order(tmp_path):
    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p)

    async def single(i):
        await log.append("t", {"who": f"s{i}"})

    async def group(i):
        await log.append_many([("t", {"who": f"g{i}.{k}"}) for k in range(3)])

    async with anyio.create_task_group() as tg:
        for i in range(4):
            tg.start_soon(single, i)
            tg.start_soon(group, i)
    await log.close()
    who = [r.data["who"] for r in read_records(p)]
    assert who == [w for i in range(4) for w in (f"s{i}", f"g{i}.0", f"g{i}.1", f"g{i}.2")]


def test_encoded_record_with_pre_encoded_data_is_the_same_line():
    from openfunctions.core import canonical_json
    from openfunctions.core.journal._encoder import encode_record

    for data in [{"b": 1, "a": [1.5, None, "é\u2028"]}, {}, {"z": {"y": True}, "q": 'q"uo\\te\n'}]:
        args = (3, "receipt", "2026-01-01T00:00:00.000000Z")
        assert encode_record(*args, data, "p" * 32) == encode_record(*args, None, "p" * 32, canonical_json(data))
    # A lone surrogate still names its path, from the text alone.
    with pytest.raises(NonJsonValue, match=r"\$\.data\.s"):
        encode_record(1, "t", "x", None, "p" * 32, canonical_json({"s": "\ud800"}))


async def test_append_encoded_writes_append_s_bytes_and_refuses_bad_input(tmp_path):
    from openfunctions.core import canonical_json
    from openfunctions.core.journal._encoder import encode_record

    log = await JournalLog.open(tmp_path / "j.jsonl")
    data = {"receipt_id": "rcpt_1", "n": [1, 2.5, "é"], "nested": {"b": None, "a": True}}
    queued: list[int] = []
    seq = await log.append_encoded("receipt", canonical_json(data), queued=lambda: queued.append(1))
    assert seq == 1 and queued == [1] and log.last_seq == 1
    await log.append("receipt", data)
    recs = list(log.records())
    assert [r.data for r in recs] == [data, data]
    lines = (tmp_path / "j.jsonl").read_bytes().splitlines(keepends=True)[1:]
    for rec, line in zip(recs, lines, strict=True):  # each line is exactly what append would have written
        assert line == encode_record(rec.seq, rec.type, rec.time, data, rec.prev or "")[0]
    for bad_type, bad_text, exc in [("", "{}", ValueError), ("t", "[1]", NonJsonValue), ("t", b"{}", NonJsonValue)]:
        with pytest.raises(exc):
            await log.append_encoded(bad_type, bad_text)  # type: ignore[arg-type]
    assert (await log.append("t", {})).seq == 3  # no seq was consumed by the refusals
    await log.close()
    assert [r.seq for r in read_records(tmp_path / "j.jsonl")] == [1, 2, 3]
