"""v1 -> v2 upgrade keeps a .pre-v2 copy; unsafe paths and modes are refused."""

from __future__ import annotations

import json
import os
import stat

import pytest

from openfunctions.core.journal import JournalCorrupt, JournalLog, JournalUnsafe, read_records
from openfunctions.core.journal._encoder import encode_v1_record

pytestmark = pytest.mark.anyio

V1_HEADER = b'{"created":"2025-01-01T00:00:00.000000Z","format":"openfunctions.journal","journal_id":"jnl_old","kind":"log","meta":{},"version":1}\n'


def _v1(with_header: bool) -> bytes:
    body = b"".join(encode_v1_record(i, "old", "2025-01-01T00:00:00Z", {"i": i}) for i in range(1, 4))
    return (V1_HEADER if with_header else b"") + body


@pytest.mark.parametrize("with_header", [True, False], ids=["v1_header", "headerless_v1"])
async def test_v1_to_v2_upgrade_keeps_pre_v2_copy(tmp_path, with_header):
    p = tmp_path / "j.jsonl"
    original = _v1(with_header)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, original)
    os.close(fd)
    assert [r.version for r in read_records(p)] == [1, 1, 1]

    log = await JournalLog.open(p)
    copy = p.with_name("j.jsonl.pre-v2")
    assert log.pre_v2_copy == copy
    assert copy.read_bytes() == original
    assert stat.S_IMODE(os.stat(copy).st_mode) == 0o600
    rec = await log.append("new", {"n": 1})
    assert (rec.seq, rec.version, rec.line) == (4, 2, 5 if with_header else 4)
    await log.close()

    recs = list(read_records(p))
    assert [(r.seq, r.version) for r in recs] == [(1, 1), (2, 1), (3, 1), (4, 2)]
    assert recs[3].offset == len(original)
    # Once upgraded, reopening leaves the copy alone (it is the v1 state).
    log = await JournalLog.open(p)
    assert log.pre_v2_copy is None
    await log.append("new", {"n": 2})
    await log.close()
    assert copy.read_bytes() == original
    # A v1 record may not follow a v2 one.
    with open(p, "ab") as f:
        f.write(encode_v1_record(6, "old", "t", {}))
    with pytest.raises(JournalCorrupt, match="follows a v2 record"):
        list(read_records(p))


async def test_symlinked_journal_is_refused(tmp_path):
    real = tmp_path / "real.jsonl"
    await (await JournalLog.open(real)).close()
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    with pytest.raises(JournalUnsafe, match="symlink"):
        await JournalLog.open(link)
    with pytest.raises(JournalUnsafe, match="symlink"):
        list(read_records(link))
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "nowhere.jsonl")
    with pytest.raises(JournalUnsafe, match="symlink"):
        await JournalLog.open(dangling)
    assert not (tmp_path / "nowhere.jsonl").exists()


async def test_symlinked_lock_file_is_refused(tmp_path):
    p = tmp_path / "j.jsonl"
    target = tmp_path / "elsewhere"
    target.write_text("")
    os.chmod(target, 0o600)
    (tmp_path / "j.jsonl.lock").symlink_to(target)
    with pytest.raises(JournalUnsafe, match="symlink"):
        await JournalLog.open(p)


async def test_group_readable_file_is_refused(tmp_path):
    p = tmp_path / "j.jsonl"
    await (await JournalLog.open(p)).close()
    os.chmod(p, 0o644)
    with pytest.raises(JournalUnsafe, match="0644"):
        await JournalLog.open(p)
    with pytest.raises(JournalUnsafe):
        list(read_records(p))


async def test_open_directory_is_refused(tmp_path):
    d = tmp_path / "shared"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    with pytest.raises(JournalUnsafe, match="0755"):
        await JournalLog.open(d / "j.jsonl")
    assert not (d / "j.jsonl").exists()


async def test_directory_symlink_is_refused(tmp_path):
    real = tmp_path / "realdir"
    real.mkdir(mode=0o700)
    (tmp_path / "linkdir").symlink_to(real)
    with pytest.raises(JournalUnsafe, match="symlink"):
        await JournalLog.open(tmp_path / "linkdir" / "j.jsonl")


async def test_journal_path_that_is_a_directory_is_refused(tmp_path):
    (tmp_path / "j.jsonl").mkdir(mode=0o700)
    with pytest.raises(JournalUnsafe, match="not a regular file"):
        await JournalLog.open(tmp_path / "j.jsonl")


async def test_created_header_is_documented_shape(tmp_path):
    p = tmp_path / "j.jsonl"
    await (await JournalLog.open(p, kind="attempt", meta={"attempt_id": "a1"})).close()
    h = json.loads(p.read_bytes().split(b"\n")[0])
    assert set(h) == {"created", "format", "journal_id", "kind", "meta", "salt", "version"}
    assert (h["format"], h["version"], h["kind"], h["meta"]) == ("openfunctions.journal", 2, "attempt", {"attempt_id": "a1"})
    assert len(h["salt"]) == 32 and h["journal_id"].startswith("jnl_")
