"""Property: whatever JSON object is appended is read back equal, in order, by every reader."""

from __future__ import annotations

import tempfile
from pathlib import Path

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.core.journal import JournalLog, read_records

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
records = st.lists(
    st.tuples(st.text(min_size=1, max_size=12), st.dictionaries(st.text(max_size=8), json_values, max_size=5)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records)
def test_append_then_read_roundtrip(recs):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "j" / "x.jsonl"

        async def run():
            log = await JournalLog.open(p)
            out = [await log.append(t, data) for t, data in recs]
            await log.close()
            log = await JournalLog.open(p)
            again = list(log.records())
            await log.close()
            return out, again

        written, reopened = anyio.run(run)
        assert [(r.type, r.data) for r in written] == recs
        assert [(r.seq, r.type, r.data, r.checksum) for r in reopened] == [
            (r.seq, r.type, r.data, r.checksum) for r in written
        ]
        assert [r.data for r in read_records(p)] == [data for _, data in recs]
