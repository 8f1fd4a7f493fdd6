"""Property: the live run state equals the fold of the file, whatever runs happened (one fold, live and at recovery)."""

from __future__ import annotations

import tempfile

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.adapters import AdapterError, ScriptedAdapter
from openfunctions.agents import RunJournal, define_agent, read_runs, run_agent
from openfunctions.core import ToolRegistry, define_tool

STEP = st.one_of(
    st.just({"tool": "echo", "arguments": {}}),
    st.just({"tool": "missing"}),
    st.text(max_size=20),
    st.just(AdapterError("down")),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.lists(STEP, min_size=0, max_size=5), st.integers(1, 4)), min_size=1, max_size=4))
def test_live_state_equals_the_fold_of_the_file(runs: list) -> None:
    echo = define_tool(name="echo", description="echo", handler=lambda p, c: "e",
                       capability={"effect": "read", "parallel_safe": True})

    async def main(tmp: str) -> None:
        journal = await RunJournal.open_in(tmp)
        reg = ToolRegistry([echo])
        for i, (script, rounds) in enumerate(runs):
            agent = define_agent(f"a{i}", "x", tools=["echo"], max_rounds=rounds, adapter=ScriptedAdapter(script))
            await run_agent(agent, f"task {i}", registry=reg, runs=journal)
        live = {k: v.to_dict() for k, v in journal.state.items()}
        await journal.close()
        assert {k: v.to_dict() for k, v in read_runs(tmp).items()} == live
        again = await RunJournal.open_in(tmp)
        assert {k: v.to_dict() for k, v in again.state.items()} == live and again.interrupted == []
        assert all(v.status in ("completed", "max_rounds", "failed") for v in again.state.values())
        await again.close()

    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(main, tmp)
