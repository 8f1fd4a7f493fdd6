"""Property: a run interrupted at any read step and resumed ends with the same result as an
uninterrupted run of the same workflow, and no write step ever runs twice.

Workflows are drawn from sequences of read tool steps, write tool steps,
transforms, parallels (of reads and transforms) and branches. The crash is the
k-th read call raising a BaseException the engine does not handle (the
process "dies" there: nothing more is recorded); the resume happens with a
fresh registry, as in a new process.
"""

from __future__ import annotations

import tempfile

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openfunctions.core import ToolRegistry, define_tool
from openfunctions.workflows import WorkflowRuns, pipe, tool_step, transform


class Crash(BaseException):
    pass


class World:
    def __init__(self, crash_at_read: int | None = None) -> None:
        self.reads = 0
        self.writes: list[int] = []
        self.crash_at_read = crash_at_read

    def registry(self) -> ToolRegistry:
        async def read(p, ctx):
            self.reads += 1
            if self.reads == self.crash_at_read:
                raise Crash()
            return {"n": p["n"] * 3 + p["k"]}

        async def write(p, ctx):
            self.writes.append(p["n"])
            return {"n": p["n"] + 7}

        return ToolRegistry([
            define_tool(name="read", description="", handler=read, capability={"effect": "read", "parallel_safe": True}),
            define_tool(name="write", description="", handler=write, capability={"effect": "write"}),
        ])


def _read(k):
    return tool_step("read", lambda v, k=k: {"n": _n(v) % 1000, "k": k}, name=f"read{k}")


def _tf(k):
    return transform(lambda v, k=k: {"n": (_n(v) + k) % 1000}, name=f"add{k}")


def _n(v):
    # a parallel's result is a list of branch results
    return sum(x["n"] for x in v) if isinstance(v, list) else v["n"]


simple = st.one_of(st.integers(0, 9).map(_read), st.integers(0, 9).map(_tf))
part = st.one_of(
    simple,
    st.just(tool_step("write", lambda v: {"n": _n(v) % 1000})),
    st.lists(simple, min_size=2, max_size=3).map(lambda bs: ("parallel", bs)),
    st.tuples(simple, simple).map(lambda ab: ("branch", ab)),
)


def build(parts):
    wf = pipe(name="prop")
    for p in parts:
        if isinstance(p, tuple) and p[0] == "parallel":
            wf = wf.parallel(*p[1])
        elif isinstance(p, tuple):
            wf = wf.branch(lambda v: _n(v) % 2 == 0, p[1][0], p[1][1], name="even")
        else:
            wf = wf.then(p)
    return wf


async def scenario(parts, crash_at: int):
    wf = build(parts)
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        clean = World()
        expected = await WorkflowRuns(d1, workflows=[wf], registry=clean.registry()).run(wf, {"n": 1}, run_id="r")
        assert expected.ok, expected

        world = World(crash_at_read=crash_at)
        crashed = False
        try:
            first = await WorkflowRuns(d2, workflows=[wf], registry=world.registry()).run(wf, {"n": 1}, run_id="r")
        except (Crash, BaseExceptionGroup):
            crashed = True
        if crashed:
            world.crash_at_read = None
            again = WorkflowRuns(d2, workflows=[wf], registry=world.registry())  # the next process
            # run() with the same id resumes the run (or starts it afresh if it crashed before its first fsync)
            first = await again.run(wf, {"n": 1}, run_id="r")
        assert first.ok, first
        assert first.result == expected.result
        assert world.writes == clean.writes  # no write step ran twice
        return crashed, first.resumed


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(part, min_size=1, max_size=6), crash_at=st.integers(1, 6))
def test_a_resumed_run_ends_like_an_uninterrupted_one(parts, crash_at):
    anyio.run(scenario, parts, crash_at)


def test_the_property_does_interrupt_runs():
    # the property is only worth something if the crash really happens mid-run
    parts = [_read(1), tool_step("write", lambda v: {"n": v["n"]}), _read(2), _tf(3)]
    assert anyio.run(scenario, parts, 2) == (True, True)
