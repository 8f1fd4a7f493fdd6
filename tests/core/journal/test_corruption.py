"""Interior damage of every kind fails closed naming offset and line; torn tails are repaired."""

from __future__ import annotations

import json
import os

import pytest

from openfunctions.core.journal import JournalCorrupt, JournalLog, read_records
from openfunctions.core.journal._encoder import encode_record, encode_v1_record

pytestmark = pytest.mark.anyio


async def _journal(p, n=5) -> list[bytes]:
    log = await JournalLog.open(p)
    for i in range(n):
        await log.append("t", {"i": i, "s": "text"})
    await log.close()
    return p.read_bytes().split(b"\n")[:-1]  # header + records, newline-free


def _write(p, lines: list[bytes]) -> None:
    p.write_bytes(b"".join(ln + b"\n" for ln in lines))


def _offset(lines: list[bytes], idx: int) -> int:
    return sum(len(ln) + 1 for ln in lines[:idx])


def _recompute(line: bytes, **changes) -> bytes:
    obj = json.loads(line)
    obj.update(changes)
    new, _ = encode_record(obj["seq"], obj["type"], obj["time"], obj["data"], obj["prev"])
    return new[:-1]


def _damage(kind: str, lines: list[bytes]) -> tuple[list[bytes], int, str]:
    """Returns (new lines, index of the line that must be blamed, reason fragment)."""
    L = list(lines)
    if kind == "flipped_byte":
        L[3] = L[3].replace(b'"text"', b'"tExt"')
        return L, 3, "checksum mismatch"
    if kind == "bad_json":
        L[3] = L[3][:-5]
        return L, 3, "invalid JSON"
    if kind == "bad_utf8":
        L[3] = L[3].replace(b'"text"', b'"t\xffxt"')
        return L, 3, "invalid UTF-8"
    if kind == "rewritten_record_breaks_chain":
        L[3] = _recompute(L[3], data={"i": 99, "s": "forged"})
        return L, 4, "broken chain"
    if kind == "seq_gap":
        del L[3]
        return L, 3, "gap in seq"
    if kind == "seq_duplicate":
        L.insert(4, L[3])
        return L, 4, "duplicate or out-of-order seq"
    if kind == "blank_line":
        L.insert(3, b"")
        return L, 3, "invalid JSON"
    if kind == "nul_in_interior":
        L[3] = b"\0" * len(L[3])
        return L, 3, "invalid JSON"
    if kind == "v1_record_in_v2":
        obj = json.loads(L[3])
        L[3] = encode_v1_record(obj["seq"], obj["type"], obj["time"], obj["data"])[:-1]
        return L, 3, "without checksum"
    if kind == "not_canonical":
        obj = json.loads(L[3])
        L[3] = json.dumps(obj, sort_keys=True).encode()  # spaces after separators
        return L, 3, "canonical"
    if kind == "extra_field":
        obj = json.loads(L[3])
        obj["x"] = 1
        L[3] = json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()
        return L, 3, "fields"
    if kind == "bad_header":
        L[0] = b'{"format":"something-else","version":2}'
        return L, 0, "not an openfunctions.journal"
    if kind == "future_version":
        h = json.loads(L[0])
        h["version"] = 3
        L[0] = json.dumps(h, separators=(",", ":"), sort_keys=True).encode()
        return L, 0, "unsupported journal version 3"
    if kind == "bad_last_complete_line":
        # A terminated final line is committed: damage there is corruption, not a torn tail.
        L[-1] = L[-1].replace(b'"text"', b'"tExt"')
        return L, len(L) - 1, "checksum mismatch"
    raise AssertionError(kind)


KINDS = [
    "flipped_byte", "bad_json", "bad_utf8", "rewritten_record_breaks_chain", "seq_gap", "seq_duplicate",
    "blank_line", "nul_in_interior", "v1_record_in_v2", "not_canonical", "extra_field", "bad_header",
    "future_version", "bad_last_complete_line",
]


@pytest.mark.parametrize("kind", KINDS)
async def test_interior_damage_fails_closed(tmp_path, kind):
    p = tmp_path / "j.jsonl"
    lines, blame, reason = _damage(kind, await _journal(p))
    _write(p, lines)
    before = p.read_bytes()
    with pytest.raises(JournalCorrupt) as ei:
        await JournalLog.open(p)
    d = ei.value.details
    assert (d["offset"], d["line"]) == (_offset(lines, blame), blame + 1), ei.value
    assert reason in d["reason"], d["reason"]
    assert f"offset {d['offset']}" in str(ei.value) and f"line {d['line']}" in str(ei.value)
    # Fail closed: nothing repaired, nothing cut, no copy made; the lock is free again.
    assert p.read_bytes() == before
    assert not os.path.exists(f"{p}.broken")
    with pytest.raises(JournalCorrupt):
        list(read_records(p))
    with pytest.raises(JournalCorrupt):
        await JournalLog.open(p)


async def _five_records_then(p, tail: bytes) -> bytes:
    """A journal of five records at ``p`` followed by ``tail``; returns the five records' bytes. A lock-free
    reader stops quietly before the tail (it may be a write in flight)."""
    await _journal(p)
    good = p.read_bytes()
    p.write_bytes(good + tail)
    assert [r.seq for r in read_records(p)] == [1, 2, 3, 4, 5]
    return good


@pytest.mark.parametrize(
    "tail,kept",
    [(b'{"chk":"12', b'{"chk":"12'), (b'{"chk":"ab\0\0\0\0', b'{"chk":"ab'),
     (b'{"chk":"ab\0\0\n\0\0', b'{"chk":"ab'), (b'{"seq":6,"type":"t"}', b'{"seq":6,"type":"t"}')],
    ids=["fragment", "fragment_then_nul", "fragment_then_nul_lines", "unterminated_but_json"],
)
async def test_torn_tail_is_repaired_with_broken_copy(tmp_path, tail, kept):
    p = tmp_path / "j.jsonl"
    good = await _five_records_then(p, tail)
    log = await JournalLog.open(p)
    assert log.repaired_tail == p.with_name("j.jsonl.broken")
    # the copy holds what was written, not the NUL bytes after it (nobody wrote those)
    assert log.repaired_tail.read_bytes() == kept
    assert oct(os.stat(log.repaired_tail).st_mode & 0o777) == "0o600"
    assert p.read_bytes() == good
    assert (await log.append("t", {})).seq == 6
    await log.close()
    # A second torn tail gets a fresh copy name; the first is kept.
    with open(p, "ab") as f:
        f.write(b"{")
    log = await JournalLog.open(p)
    assert log.repaired_tail == p.with_name("j.jsonl.broken.1")
    await log.close()
    assert p.with_name("j.jsonl.broken").read_bytes() == kept


@pytest.mark.parametrize("tail", [b"\0" * 4096, b"\0\0\0\n\0\0\n"], ids=["nul_block", "nul_lines"])
async def test_nul_bytes_after_the_last_record_are_room_not_damage(tmp_path, tail):
    """Only NUL (and newline) bytes after the last record: room a writer reserved, or a block a file system
    never wrote. Nothing in it was written, so an open cuts it without a copy; readers report it as reserved."""
    p = tmp_path / "j.jsonl"
    good = await _five_records_then(p, tail)
    log = await JournalLog.open(p)
    assert log.repaired_tail is None and log.recovery.reserved == len(tail) and log.recovery.torn is None
    assert p.read_bytes() == good  # a log that does not reserve appends at the end: the room is cut
    assert (await log.append("t", {})).seq == 6
    await log.close()
    assert not os.path.exists(f"{p}.broken")


async def test_empty_file_is_corrupt_not_silently_reinitialised(tmp_path):
    p = tmp_path / "j.jsonl"
    p.touch(mode=0o600)
    with pytest.raises(JournalCorrupt, match="empty"):
        await JournalLog.open(p)
