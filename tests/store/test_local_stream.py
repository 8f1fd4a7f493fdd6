"""The local store's journal as a core record stream: a store written by the previous code still reads, the live
fold equals the fold replayed from disk (compactions running while writes go on included), and a record the fold
cannot apply (an unknown type, a missing field) refuses the store.

The fixtures (tests/fixtures/records_v1/store*) were written by ``LocalStore`` from before the port, with the
entries and revision each folded to beside them (``expected.json``).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.core.journal import JournalLog
from openfunctions.core.records import UnknownRecords, replay
from openfunctions.store import Conflict, StoreCorrupt, open_local_store
from openfunctions.store._local import JOURNAL_NAME, STORE, LocalStore

from .._datadirs import copy_data_dir

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1"

pytestmark = pytest.mark.anyio


def live(store: LocalStore) -> tuple[dict[str, list[Any]], int]:
    return {k: [e.value, e.version, e.updated_at] for k, e in store._state.data.items()}, store._state.rev


def replayed(path: Path) -> tuple[dict[str, list[Any]], int]:
    """What a lock-free reader folds from the journal (the header's ``rev`` is the revision's floor)."""
    header: dict[str, Any] = {}
    state = replay(STORE, path, check_header=header.update).state
    assert state.keys == sorted(state.data)
    return ({k: [e.value, e.version, e.updated_at] for k, e in state.data.items()},
            max(state.rev, int(header.get("rev", 0))))


@pytest.mark.parametrize("name", ["store", "store_compacted"])
async def test_a_store_written_by_the_previous_code_reads_to_the_same_entries(tmp_path: Path, name: str) -> None:
    data = copy_data_dir(FIXTURES / name, tmp_path / "data")
    expected = json.loads((data / "expected.json").read_text())
    path = data / "store" / "notes" / JOURNAL_NAME
    assert replayed(path) == (expected["entries"], expected["revision"])
    store = await open_local_store("notes", data)
    try:
        assert live(store) == (expected["entries"], expected["revision"])
        assert {e.key: [e.value, e.version, e.updated_at] for e in await store.list()} == expected["entries"]
        e = await store.put("new", 1)
        assert e.version == expected["revision"] + 1  # versions never go back (the compacted header's floor)
        b = expected["entries"]["b"]
        with pytest.raises(Conflict):
            await store.compare_and_set("b", b[1] - 1, "stale")
        await store.compare_and_set("b", b[1], "fresh")
        await store.compact()
        now = live(store)
    finally:
        await store.aclose()
    assert replayed(path) == now
    store = await open_local_store("notes", data)
    assert live(store) == now
    await store.aclose()


async def _append_raw(tmp_path: Path, type_: str, data: dict[str, Any]) -> Path:
    store = await open_local_store("s", tmp_path)
    await store.put("a", 1)
    await store.aclose()
    path = tmp_path / "store" / "s" / JOURNAL_NAME
    log = await JournalLog.open(path)
    await log.append(type_, data)
    await log.close()
    return path


async def test_a_record_type_this_version_does_not_know_refuses_the_store(tmp_path: Path) -> None:
    assert STORE.unknown is UnknownRecords.REFUSE
    path = await _append_raw(tmp_path, "put_ttl", {"k": "a", "v": 2, "ver": 2, "ttl": 60})  # a newer version's
    before = path.read_bytes()
    with pytest.raises(StoreCorrupt, match=r"store\.journal.*record 2 \('put_ttl'\).*unknown record type 'put_ttl'"):
        await open_local_store("s", tmp_path)
    with pytest.raises(StoreCorrupt, match="unknown record type 'put_ttl'"):
        replay(STORE, path)
    assert path.read_bytes() == before  # nothing rewritten: the next version still reads it
    store = await open_local_store("s", tmp_path / "elsewhere")  # the refused open held no lock
    await store.aclose()


@pytest.mark.parametrize("type_, data", [
    ("put", {"k": "a", "ver": 2}),  # no value
    ("del", {"k": 7, "ver": 2}),  # a key that is no string
    ("txn", {"ops": [{"op": "put", "k": "b", "v": 1, "ver": 2}, {"op": "put", "k": "c", "ver": 3}], "at": ""}),
    ("txn", {"ops": "put"}),
])
async def test_a_record_the_fold_cannot_apply_is_a_clear_error_naming_it(tmp_path: Path, type_: str,
                                                                          data: dict[str, Any]) -> None:
    await _append_raw(tmp_path, type_, data)
    with pytest.raises(StoreCorrupt, match=rf"store\.journal.*record 2 \('{type_}'\) cannot be applied"):
        await open_local_store("s", tmp_path)
    store = await open_local_store("s", tmp_path / "elsewhere")
    await store.aclose()


# -- live vs replay ----------------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "d/1", "d/2"])
OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), KEYS, st.integers(0, 9)),
    st.tuples(st.just("delete"), KEYS, st.just(0)),
    st.tuples(st.just("cas"), KEYS, st.integers(0, 3)),
    st.tuples(st.just("txn"), KEYS, st.integers(0, 9)),
    st.tuples(st.just("burst"), KEYS, st.integers(2, 12)),
    st.tuples(st.just("compact"), KEYS, st.just(0)),
    st.tuples(st.just("reopen"), KEYS, st.just(0)),
), max_size=20)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 6), OPS)
def test_the_live_store_equals_the_store_replayed_from_disk(min_records: int, ops: list[tuple[str, str, int]]) -> None:
    async def main(root: Path) -> None:
        def opened() -> Any:  # compacting often, in the background, while writes go on
            return open_local_store("s", root, compact_min_records=min_records, compact_ratio=1.0)

        store = await opened()
        path = root / "store" / "s" / JOURNAL_NAME
        try:
            for op, key, n in ops:
                if op == "put":
                    await store.put(key, n)
                elif op == "delete":
                    await store.delete(key)
                elif op == "cas":
                    cur = await store.get(key)
                    try:
                        await store.compare_and_set(key, (cur.version if cur else 0) + (n == 0), n)
                    except Conflict:
                        pass
                elif op == "txn":
                    async with store.transaction() as tx:
                        await tx.put(key, n)
                        await tx.delete("d/1" if key != "d/1" else "a")
                elif op == "burst":  # writes one after another while a compaction runs: its tail
                    async def writes(store: LocalStore = store, key: str = key, n: int = n) -> None:
                        for i in range(n):
                            await store.put(f"{key}/{i}", i)
                            if i % 3 == 0:
                                await store.delete(f"{key}/{i}")

                    await asyncio.gather(store.compact(), writes(), *(store.put(f"{key}/x{i}", i) for i in range(n)))
                elif op == "compact":
                    await store.compact()
                elif op == "reopen":
                    before = live(store)
                    await store.aclose()
                    store = await opened()
                    assert live(store) == before
                await store.flush()
                while store._compacting is not None:  # a background compaction: let it finish
                    await asyncio.wait([store._compacting])
                assert replayed(path) == live(store)
        finally:
            await store.aclose()

    with tempfile.TemporaryDirectory() as d:
        asyncio.run(main(Path(d)))
