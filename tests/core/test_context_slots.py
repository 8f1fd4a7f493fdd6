"""ToolExecutionContext's typed slots: built by its own __init__ (kept in step with the fields), carried by copies."""

from __future__ import annotations

import dataclasses
import inspect

from openfunctions.core import HostChannel, TaskChannel, ToolExecutionContext, WorkGrant, with_child_execution


def test_init_takes_every_field_in_order_with_the_fields_defaults() -> None:
    params = list(inspect.signature(ToolExecutionContext.__init__).parameters.values())[1:]
    fields = dataclasses.fields(ToolExecutionContext)
    assert [p.name for p in params] == [f.name for f in fields]
    bare = ToolExecutionContext()
    for f in fields:
        expected = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert getattr(bare, f.name) == expected, f.name
    assert ToolExecutionContext().metadata is not ToolExecutionContext().metadata  # no shared mutable default


def test_copies_keep_the_slots_and_a_child_execution_inherits_them() -> None:
    async def sampler(params: dict[str, object]) -> dict[str, object]:
        return {}

    host, work = HostChannel(sampler, {"tools": {}}), WorkGrant(granted_paths=("src/**",))
    ctx = ToolExecutionContext(principal="p", host=host, run_id="run_1", work=work, request=object())
    assert dataclasses.replace(ctx, principal="q").host is host
    moved = ctx.replace(receipt_id="rcpt_1", reservation=object())
    assert (moved.host, moved.work, moved.run_id, moved.request) == (host, work, "run_1", ctx.request)
    child = with_child_execution(moved)
    assert (child.host, child.work, child.run_id, child.parent_receipt_id) == (host, work, "run_1", "rcpt_1")
    assert ctx == ToolExecutionContext(principal="p", host=host, run_id="run_1", work=work, request=ctx.request)


def test_a_task_handle_is_a_task_channel() -> None:
    from types import SimpleNamespace

    from openfunctions.servers._tasks import TaskHandle

    assert isinstance(TaskHandle(SimpleNamespace(task_id=None)), TaskChannel)  # type: ignore[arg-type]
    assert not isinstance(object(), TaskChannel)
