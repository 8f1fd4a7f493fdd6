"""Room reserved ahead of the records (``JournalLog.open(preallocate=True)``, the execution journal's mode).

The file is longer than its records while the log is open (NUL bytes the writes fill), readers see only the
records, watchers see every append through ``file_stamp``, a clean close leaves exactly the records, a crash
leaves room the next open recognises, and a torn write into the room is told from damage by its size.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.core.journal import ExecutionJournal, JournalCorrupt, JournalLog, file_stamp, read_records
from openfunctions.core.journal._decoder import Decoder, data_end
from openfunctions.core.journal._fsutil import FileOps
from openfunctions.core.journal._record import TORN_WRITE_MAX
from openfunctions.core.journal._writer import RESERVE_MIN

pytestmark = pytest.mark.anyio


async def test_an_open_log_keeps_room_past_its_records_and_readers_see_only_the_records(tmp_path):
    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p, kind="log", preallocate=True)
    stamps = [file_stamp(p)]
    for i in range(5):
        await log.append("t", {"i": i})
        stamps.append(file_stamp(p))
    size = os.stat(p).st_size
    assert size >= log.size + RESERVE_MIN  # the room is there, past the records
    assert p.read_bytes()[log.size:] == b"\0" * (size - log.size)
    # The size did not move with the appends (all five went into the room), the stamp did with each.
    assert {s[2] for s in stamps[1:]} == {size}
    assert [s[4] for s in stamps] == sorted({s[4] for s in stamps}) and len({s[4] for s in stamps}) == 6
    assert stamps[-1][4] == log.size
    assert [r.data["i"] for r in read_records(p)] == [0, 1, 2, 3, 4]
    fd = os.open(p, os.O_RDONLY)
    try:
        dec = Decoder(fd, str(p))
        assert len(list(dec)) == 5
        assert dec.result.torn is None and dec.result.reserved == size - log.size
        assert data_end(fd, size) == log.size
    finally:
        os.close(fd)
    await log.close()
    # A closed log is exactly its records.
    data = p.read_bytes()
    assert b"\0" not in data and data.endswith(b"\n") and len(data) == log.size


async def test_a_crash_leaves_room_that_the_next_open_takes_back_whether_or_not_it_reserves(tmp_path):
    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p, kind="log", preallocate=True)
    for i in range(3):
        await log.append("t", {"i": i})
    records_end = log.size
    crashed = p.read_bytes()  # what the disk holds if the process dies now: the records, then the room
    await log.close()
    assert len(crashed) > records_end and crashed[records_end:].strip(b"\0") == b""

    for reserve in (True, False):
        p.write_bytes(crashed)
        log = await JournalLog.open(p, preallocate=reserve)
        assert log.repaired_tail is None and log.recovery.torn is None
        assert log.recovery.reserved == len(crashed) - records_end and log.last_seq == 3
        assert (await log.append("t", {"i": 3})).seq == 4
        assert [r.data["i"] for r in read_records(p)] == [0, 1, 2, 3]
        await log.close()
        assert b"\0" not in p.read_bytes()
        assert not os.path.exists(f"{p}.broken")


def _crashed_with_hole(p, *, hole: int, after: bytes) -> bytes:
    """The file a crash inside a write into reserved room can leave: good records, then a block the disk never
    wrote (NUL), then a later block of the same write that it did, then the rest of the room."""
    good = p.read_bytes()
    p.write_bytes(good + b"\0" * hole + after + b"\0" * 8192)
    return good


async def _records(p, n):
    log = await JournalLog.open(p, kind="log", preallocate=True)
    for i in range(n):
        await log.append("t", {"i": i})
    await log.close()


async def test_a_torn_write_into_the_room_is_cut_with_a_copy_of_what_was_written(tmp_path):
    p = tmp_path / "j.jsonl"
    await _records(p, 3)
    later = b'"seq":9,"type":"t"}\n{"chk":"0123456789abcdef0123456789abcdef","data":{},"prev":"x"}\n'
    good = _crashed_with_hole(p, hole=4096, after=later)
    assert [r.seq for r in read_records(p)] == [1, 2, 3]  # a reader stops before it
    log = await JournalLog.open(p, preallocate=True)
    assert log.last_seq == 3 and log.recovery.torn is not None and "torn write" in log.recovery.torn.reason
    assert log.repaired_tail is not None and log.repaired_tail.read_bytes() == b"\0" * 4096 + later.rstrip(b"\n")
    assert p.read_bytes()[:len(good)] == good
    assert (await log.append("t", {})).seq == 4
    await log.close()


async def test_a_hole_followed_by_more_than_one_write_of_records_is_damage(tmp_path):
    """Data after a hole that no single write can have held: acknowledged records were damaged. Fail closed."""
    p = tmp_path / "j.jsonl"
    await _records(p, 3)
    line = b'{"chk":"0123456789abcdef0123456789abcdef","data":{"pad":"' + b"x" * 900 + b'"},"prev":"y"}\n'
    after = line * (TORN_WRITE_MAX // len(line) + 2)
    _crashed_with_hole(p, hole=4096, after=after)
    before = p.read_bytes()
    with pytest.raises(JournalCorrupt, match="not a torn write"):
        await JournalLog.open(p, preallocate=True)
    assert p.read_bytes() == before and not os.path.exists(f"{p}.broken")


async def test_one_long_line_torn_by_a_hole_is_a_torn_write_however_long(tmp_path):
    """A line longer than ``TORN_WRITE_MAX`` is written alone, so a hole inside it is still one write."""
    p = tmp_path / "j.jsonl"
    await _records(p, 2)
    tail = b"x" * (TORN_WRITE_MAX + 10) + b'"}\n'
    _crashed_with_hole(p, hole=4096, after=tail)
    log = await JournalLog.open(p, preallocate=True)
    assert log.last_seq == 2 and log.repaired_tail is not None
    await log.close()


class CountingOps(FileOps):
    def __init__(self) -> None:
        self.writes: list[int] = []
        self.syncs = 0

    def write_all(self, fd: int, data: bytes) -> None:
        self.writes.append(len(data))
        super().write_all(fd, data)

    def sync(self, fd: int) -> None:
        self.syncs += 1
        super().sync(fd)


@pytest.mark.parametrize("reserve", [True, False])
async def test_no_more_than_one_bound_of_bytes_goes_between_two_fsyncs(tmp_path, reserve):
    p = tmp_path / "j.jsonl"
    ops = CountingOps()
    log = await JournalLog.open(p, kind="log", preallocate=reserve, _ops=ops)
    pad = "y" * 4000
    recs = await log.append_many([("t", {"i": i, "pad": pad}) for i in range(700)])  # ~2.9 MB in one group
    big = await log.append("t", {"pad": "z" * (TORN_WRITE_MAX + 5)})  # one line over the bound: alone
    assert len(ops.writes) == ops.syncs and max(ops.writes[:-1]) <= TORN_WRITE_MAX
    assert ops.writes[-1] > TORN_WRITE_MAX and len(ops.writes) >= 4
    assert sum(ops.writes) == log.size - len(p.read_bytes().split(b"\n", 1)[0]) - 1
    await log.close()
    assert [r.seq for r in read_records(p)] == [r.seq for r in recs] + [big.seq]


async def test_a_file_system_that_cannot_reserve_room_gets_plain_appends(tmp_path):
    class NoRoom(FileOps):
        def reserve(self, fd: int, offset: int, length: int) -> None:
            raise OSError(95, "Operation not supported (injected)")

    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p, kind="log", preallocate=True, _ops=NoRoom())
    for i in range(3):
        await log.append("t", {"i": i})
    assert os.stat(p).st_size == log.size  # nothing reserved, nothing lost
    await log.close()
    assert [r.data["i"] for r in read_records(p)] == [0, 1, 2]


async def test_the_execution_journal_reserves_and_its_segments_are_exactly_their_records(tmp_path):
    p = tmp_path / "exec.journal"
    j = await ExecutionJournal.open(p)
    await j.log.append("note", {"n": 1})
    assert os.stat(p).st_size > j.log.size
    segment = await j.log.rotate()
    assert b"\0" not in segment.read_bytes()
    await j.log.append("note", {"n": 2})
    assert os.stat(p).st_size > j.log.size
    await j.close()
    assert b"\0" not in p.read_bytes()


async def test_a_reader_next_to_a_live_writer_stops_at_the_end_it_found(tmp_path):
    """A record appended after a lock-free reader found the end of the data lies past that end: the reader
    stops before it (as before a write in flight) rather than calling it damage; an open (no writer left) would
    judge the same bytes strictly."""
    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p, kind="log", preallocate=True)
    await log.append("t", {"i": 0})
    fd = os.open(p, os.O_RDONLY)
    try:
        reader = Decoder(fd, str(p))  # has found the end of the data
        await log.append("t", {"i": 1})  # lands past it, inside the room
        assert [r.data["i"] for r in reader] == [0]
        assert reader.result.torn is not None and "live writer" in reader.result.torn.reason
        judged = Decoder(fd, str(p), writer_gone=True)
        assert [r.data["i"] for r in judged] == [0, 1] and judged.result.torn is None
    finally:
        os.close(fd)
    await log.close()


@pytest.mark.parametrize("reserve", [True, False])
async def test_lock_free_readers_racing_a_writer_see_a_prefix_and_never_damage(tmp_path, reserve):
    """Readers polling in a thread while the writer fills its room (and reserves more, and its lines sometimes
    span pages): every read is a prefix of what gets written, and none is refused as corrupt."""
    import threading

    import anyio

    p = tmp_path / "j.jsonl"
    log = await JournalLog.open(p, kind="log", preallocate=reserve)
    done = threading.Event()
    reads: list[list[int]] = [[], []]
    errors: list[BaseException] = []

    def poll(mine: list[int]) -> None:
        try:
            while not done.is_set():
                seen = [r.data["i"] for r in read_records(p)]
                assert seen == list(range(len(seen))), seen[:5]
                mine.append(len(seen))
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    readers = [threading.Thread(target=poll, args=(mine,)) for mine in reads]
    for t in readers:
        t.start()
    try:
        for i in range(1500):
            await log.append("t", {"i": i, "pad": "p" * (i * 37 % 3000)})
    finally:
        done.set()
        for t in readers:
            await anyio.to_thread.run_sync(t.join)
    await log.close()
    assert not errors, errors[0]
    for mine in reads:  # each reader saw the file grow, never shrink, and read it many times meanwhile
        assert len(mine) > 10 and mine == sorted(mine) and mine[-1] <= 1500, mine[:20]
    assert [r.data["i"] for r in read_records(p)] == list(range(1500))


# What the end of a file can hold after a crash or damage: runs of NUL (room, unwritten blocks), newlines, and
# pieces of record lines (a write's bytes, whole or cut).
_PIECE = st.one_of(
    st.integers(min_value=1, max_value=6000).map(lambda n: b"\0" * n),
    st.just(b"\n"),
    st.sampled_from([b'{"chk":"', b'{"chk":"0123456789abcdef0123456789abcdef","data":{},"prev":"x","seq":9}\n',
                     b'"type":"t"}\n', b"garbage", b"\xff\xfe"]),
)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(tail=st.lists(_PIECE, max_size=6), reserve=st.booleans())
def test_any_tail_is_refused_whole_or_cut_after_the_last_valid_record(tmp_path_factory, tail, reserve):
    """Whatever follows the records, lock-free readers never fail with anything but ``JournalCorrupt`` and
    see only the records; an open either refuses (the file unchanged, nothing copied) or keeps every record,
    copies what was written after them (never more than the tail) and can append again."""
    import anyio

    d = tmp_path_factory.mktemp("tail")
    p = d / "j.jsonl"

    async def records() -> None:
        log = await JournalLog.open(p, kind="log", preallocate=reserve)
        for i in range(4):
            await log.append("t", {"i": i})
        await log.close()

    anyio.run(records)
    good = p.read_bytes()
    junk = b"".join(tail)
    p.write_bytes(good + junk)
    try:
        seen = [r.data["i"] for r in read_records(p)]
    except JournalCorrupt:
        seen = None
    if seen is not None:
        assert seen[:4] == [0, 1, 2, 3]

    async def reopen() -> tuple[object, list[int]]:
        try:
            log = await JournalLog.open(p, kind="log", preallocate=reserve)
        except JournalCorrupt as exc:
            return exc, []
        try:
            await log.append("t", {"i": 99})
            return log.repaired_tail, [r.data["i"] for r in log.records()]
        finally:
            await log.close()

    outcome, after = anyio.run(reopen)
    if isinstance(outcome, JournalCorrupt):
        assert p.read_bytes() == good + junk and not list(d.glob("j.jsonl.broken*"))
        return
    assert after[:4] == [0, 1, 2, 3] and after[-1] == 99
    if outcome is not None:
        copied = outcome.read_bytes()
        assert copied and copied in junk and copied == copied.rstrip(b"\0\n")  # what was written, not the room
    assert b"\0" not in p.read_bytes()
