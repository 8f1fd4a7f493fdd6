"""Grants as a core record stream: live fold = replayed fold, and a grants journal of the previous code still reads.

The fixture (tests/fixtures/records_v1/grants) was written by ``GrantStore`` from before the port, with
the grants it folded to beside it (``expected.json``).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.core.journal import JournalLog
from openfunctions.core.records import FileRecordLog, UnknownRecords, replay
from openfunctions.work import GrantStore, GrantStoreCorrupt
from openfunctions.work._grants import GRANTS, Grant

from .._datadirs import copy_data_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1"
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

pytestmark = pytest.mark.anyio


def _described(grants) -> dict:
    return {g.grant_id: g.to_record() | {"revoked_at": g.revoked_at and g.revoked_at.isoformat(),
                                         "revoked_by": g.revoked_by} for g in grants}


async def test_a_grants_journal_written_by_the_previous_code_reads_to_the_same_grants(tmp_path):
    data = tmp_path / "data"
    copy_data_dir(FIXTURES / "grants", data)
    expected = json.loads((data / "expected.json").read_text())
    store = GrantStore.in_data_dir(data)
    assert _described(await store.list()) == expected  # lock-free
    revoked = next(k for k, v in expected.items() if v["revoked_at"])
    again = await store.revoke(revoked, by="someone else")  # the writer's fold: already revoked, unchanged
    assert _described([again]) == {revoked: expected[revoked]}
    extra = await store.issue(principal="new", steps=["test"], ttl=dt.timedelta(hours=1))
    assert _described(await store.list()) == {**expected, **_described([extra])}


async def test_a_record_type_this_version_does_not_know_refuses_every_grant(tmp_path):
    assert GRANTS.unknown is UnknownRecords.REFUSE
    store = GrantStore(tmp_path / "g.journal")
    g = await store.issue(principal="a", steps=["s"], ttl=dt.timedelta(hours=1))
    log = await JournalLog.open(store.path)
    await log.append("grant.narrowed", {"v": 1, "grant_id": g.grant_id, "steps": []})  # a newer version's
    await log.close()
    with pytest.raises(GrantStoreCorrupt, match=r"seq 2 \(grant.narrowed\).*unknown record type 'grant.narrowed'"):
        await store.active_for("a")
    with pytest.raises(GrantStoreCorrupt):  # nor can one be issued past it
        await store.issue(principal="b", steps=["s"], ttl=dt.timedelta(hours=1))


# -- live vs replay ----------------------------------------------------------------------------

OPS = st.lists(st.one_of(
    st.tuples(st.just("issue"), st.sampled_from(["a", "b"]), st.integers(1, 48)),
    st.tuples(st.just("revoke"), st.integers(0, 5), st.integers(0, 48)),
    st.tuples(st.just("reopen"), st.just(""), st.just(0)),
), max_size=20)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS)
def test_the_live_grants_fold_equals_the_fold_replayed_from_disk(ops):
    async def main(path: Path) -> None:
        log = await FileRecordLog.open(GRANTS, path)
        issued: list[str] = []
        try:
            for op, who, n in ops:
                if op == "issue":
                    g = Grant.new(principal=who, steps=["s"], ttl=dt.timedelta(hours=n), now=NOW)
                    await log.append("grant.issued", {"v": 1, "grant": g.to_record()})
                    issued.append(g.grant_id)
                elif op == "revoke" and issued:
                    gid = issued[who % len(issued)]
                    at = (NOW + dt.timedelta(hours=n)).isoformat().replace("+00:00", "Z")
                    await log.append("grant.revoked", {"v": 1, "grant_id": gid, "revoked_at": at, "revoked_by": "op"})
                elif op == "reopen":
                    await log.close()
                    log = await FileRecordLog.open(GRANTS, path)
                if os.path.exists(path):
                    assert replay(GRANTS, path).state == log.state
        finally:
            await log.close()
        if os.path.exists(path):  # what the server's lock-free checks read
            assert {g.grant_id: g for g in await GrantStore(path).list()} == log.state

    with tempfile.TemporaryDirectory() as d:
        anyio.run(main, Path(d) / "grants.journal")
