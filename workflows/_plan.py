"""The engine: a workflow compiled to a tree of nodes, each with its path, run by :class:`Exec`.

A path names a step's place in the workflow and is its identity in a run
journal: ``"2"`` is the third step of the top-level sequence, ``"3.1.0"``
the first step of the second branch of the parallel at ``"3"``, ``"4.t.0"``
the first step of the true side of the branch at ``"4"``. Paths are fixed by
the workflow's shape, which the run's digest pins.

With a :class:`~._runlog.RunJournal` (a durable run) each leaf first looks
its path up in the journal's state: a settled step returns its recorded
result (or replays its recorded failure) without running.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import weakref
from typing import Any

import anyio

from openfunctions.core import ToolDefinition, ToolExecutionContext, ToolResult, check_json
from openfunctions.core.errors import NonJsonValue, OpenFunctionsError, ToolError, ToolNotFound

from ._admission import child_context
from ._errors import (
    NonDeterministic,
    StepFailed,
    StepInterrupted,
    StepOutputInvalid,
    WorkflowDefinitionError,
    WorkflowError,
)
from ._runlog import RunJournal, StepRecord
from ._steps import LLMStep, Step, ToolStep, Transform


class Node:
    __slots__ = ("path",)

    async def run(self, ex: Exec, value: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


class Leaf(Node):
    __slots__ = ("step",)

    def __init__(self, path: str, step: Step) -> None:
        self.path = path
        self.step = step

    async def run(self, ex: Exec, value: Any) -> Any:
        step = self.step
        if ex.journal is not None:
            rec = ex.journal.state.steps.get(self.path)
            if rec is not None:
                replayed = _replay(self.path, rec)
                if replayed is not _MISSING:
                    return replayed
        if step.kind == "tool":
            return await ex.tool(self.path, step, value)  # type: ignore[arg-type]
        if step.kind == "transform":
            return await ex.transform(self.path, step, value)  # type: ignore[arg-type]
        return await ex.llm(self.path, step, value)  # type: ignore[arg-type]


class Seq(Node):
    __slots__ = ("children",)

    def __init__(self, path: str, children: list[Node]) -> None:
        self.path = path
        self.children = children

    async def run(self, ex: Exec, value: Any) -> Any:
        for child in self.children:
            value = await child.run(ex, value)
        return value


class Par(Node):
    __slots__ = ("branches",)

    def __init__(self, path: str, branches: list[Node]) -> None:
        self.path = path
        self.branches = branches

    async def run(self, ex: Exec, value: Any) -> Any:
        results: list[Any] = [None] * len(self.branches)
        failures: list[BaseException] = []

        async def one(i: int, node: Node) -> None:
            try:
                results[i] = await node.run(ex, value)
            except Exception as exc:
                # The first failure wins; the siblings are cancelled (their
                # tool calls settle as cancelled, with receipts).
                if not failures:
                    failures.append(exc)
                    tg.cancel_scope.cancel()

        async with anyio.create_task_group() as tg:
            for i, node in enumerate(self.branches):
                tg.start_soon(one, i, node)
        if failures:
            raise failures[0]
        return results


class Branch(Node):
    __slots__ = ("predicate", "name", "if_true", "if_false")

    def __init__(self, path: str, predicate: Any, name: str, if_true: Node | None, if_false: Node | None) -> None:
        self.path = path
        self.predicate = predicate
        self.name = name
        self.if_true = if_true
        self.if_false = if_false

    async def run(self, ex: Exec, value: Any) -> Any:
        try:
            taken = bool(self.predicate(value))
        except Exception as exc:
            raise StepFailed(
                f"step {self.path} (branch {self.name}): the predicate raised {type(exc).__name__}: {exc}",
                details={"step": self.path, "name": self.name, "cause": type(exc).__name__},
            ) from exc
        if ex.journal is not None and ex.journal.state.steps:
            other = f"{self.path}.{'f' if taken else 't'}"
            if any(p == other or p.startswith(other + ".") for p in ex.journal.state.steps):
                raise NonDeterministic(
                    f"step {self.path} (branch {self.name}): the predicate now answers {taken}, but the run's "
                    f"journal has steps on the other side; predicates must be deterministic (docs/WORKFLOWS.md)",
                    details={"step": self.path, "name": self.name},
                )
        side = self.if_true if taken else self.if_false
        return value if side is None else await side.run(ex, value)


_MISSING = object()


def _replay(path: str, rec: StepRecord) -> Any:
    """A recorded step's result, its recorded failure raised again, or ``_MISSING`` (run it)."""
    if rec.status == "succeeded":
        return rec.result
    if rec.status == "failed" and not rec.uncertain:
        err = rec.error or {}
        raise StepFailed(
            f"step {path} ({rec.name}) failed: {err.get('message', 'no message recorded')}",
            details={"step": path, "name": rec.name, "cause": err.get("code"), "receipt_id": rec.receipt_id, "replayed": True},
        )
    # cancelled (certainly not applied): run it again. Uncertain steps never get here: the run is blocked.
    return _MISSING


class Exec:
    """One execution of a compiled workflow: where tool, transform and LLM steps go."""

    __slots__ = ("registry", "adapter", "ctx", "journal")

    def __init__(self, registry: Any, adapter: Any, ctx: ToolExecutionContext | None, journal: RunJournal | None) -> None:
        self.registry = registry
        self.adapter = adapter
        # Run from inside a running tool (a workflow served as a tool): each tool step's context comes
        # from child_context (._admission): admitted on its own and linked to that call's receipt once
        # the call gave its reservation back, else a child execution inside the reservation it holds.
        self.ctx = ctx
        self.journal = journal

    async def tool(self, path: str, step: ToolStep, value: Any) -> Any:
        registry = self.registry
        try:
            params = step.params_for(value)
            tool = registry.get(step.tool)
        except ToolNotFound as exc:
            raise StepFailed(f"step {path} ({step.name}): {exc.message}", details={"step": path, "name": step.name, "cause": exc.code}) from None
        except Exception as exc:
            raise StepFailed(
                f"step {path} ({step.name}): building the arguments raised {type(exc).__name__}: {exc}",
                details={"step": path, "name": step.name, "cause": type(exc).__name__},
            ) from exc
        j = self.journal
        cap = tool.capability
        read = cap is not None and cap.effect == "read"
        ctx = child_context(self.ctx, tool) if self.ctx is not None else None
        if j is not None:
            try:
                check_json(params)
            except NonJsonValue as exc:
                raise StepFailed(f"step {path} ({step.name}): arguments have no JSON form: {exc.message}",
                                 details={"step": path, "name": step.name, "cause": exc.code}) from None
        attempt = 0
        try:
            while True:
                attempt += 1
                detailed = None
                with anyio.move_on_after(step.timeout) if step.timeout is not None else contextlib.nullcontext():
                    detailed = await self._call(path, step, tool, params, ctx, read)
                if detailed is None:  # timed out: the executor settled the call as cancelled
                    if read and attempt <= step.retries:
                        await anyio.sleep(step.retry_delay)
                        continue
                    msg = f"did not finish within {step.timeout:g} s (attempt {attempt})"
                    if j is not None:
                        j.failed(path, step.name, "failed", {"code": "workflow_step_timeout", "message": msg},
                                 uncertain=not read, effect=not read, attempt=attempt)
                    raise StepFailed(f"step {path} ({step.name}): tool {step.tool!r} {msg}",
                                     details={"step": path, "name": step.name, "cause": "workflow_step_timeout",
                                              "certainty": "known" if read else "unknown", "attempts": attempt})
                receipt = detailed.receipt
                err = detailed.error
                if err is None:
                    break
                safe = receipt.outcome == "failed" and (read or receipt.certainty == "known")
                if safe and attempt <= step.retries:
                    await anyio.sleep(step.retry_delay)
                    continue
                if receipt.outcome == "cancelled" and receipt.certainty == "known" and not receipt.handler_started:
                    # The host cancelled the call before it ran (its scheduler closed: shutting down). Not
                    # the step's outcome: nothing is recorded, a durable run stays unfinished.
                    raise StepInterrupted(
                        f"step {path} ({step.name}): tool {step.tool!r} was not run: {err.message}",
                        details={"step": path, "name": step.name, "cause": err.code, "receipt_id": receipt.receipt_id,
                                 "certainty": receipt.certainty, "attempts": attempt},
                    )
                if j is not None:
                    j.failed(path, step.name, "failed", {"code": err.code, "message": err.message}, receipt,
                             uncertain=not read and receipt.certainty == "unknown", effect=not read, attempt=attempt)
                raise StepFailed(
                    f"step {path} ({step.name}): tool {step.tool!r} {receipt.outcome}: {err.message}",
                    details={"step": path, "name": step.name, "cause": err.code, "receipt_id": receipt.receipt_id,
                             "certainty": receipt.certainty, "attempts": attempt},
                )
        except anyio.get_cancelled_exc_class():
            if j is not None:
                # The executor settled the call (receipt: cancelled) before re-raising.
                j.failed(path, step.name, "cancelled", {"code": "cancelled", "message": "cancelled while running"},
                         uncertain=not read, effect=not read)
            raise
        out = _tool_output(detailed)
        if j is not None:
            return j.succeeded(path, step.name, out, receipt, effect=not read, attempt=attempt,
                               requires_verification=cap is not None and cap.requires_verification)
        return out

    async def _call(self, path: str, step: ToolStep, tool: ToolDefinition, params: Any, ctx: Any, read: bool) -> Any:
        """One attempt: the executor's pipeline; in a durable run a non-read tool's handler first waits
        for the step's start record (written now, with everything buffered)."""
        j = self.journal
        registry = self.registry
        if j is None:
            return await registry.execute_detailed(step.tool, params, ctx)
        if read:
            await j.before_step(path, step.name, step.tool, params, effect=False)
            return await registry.execute_detailed(step.tool, params, ctx)
        gate = j.begin_step(path, step.name, step.tool, params)
        try:
            # The same executor pipeline registry.execute_detailed runs, on a copy of the tool whose
            # handler first waits for the step's start record (same spec, same receipt).
            token = _GATE.set(gate)
            try:
                detailed = await registry.executor.execute_detailed(_gated(tool), params, ctx)
            finally:
                _GATE.reset(token)
            await gate  # a journal failure surfaces here (the handler did not run)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await _settle(gate)
            raise
        return detailed

    async def transform(self, path: str, step: Transform, value: Any) -> Any:
        try:
            out = step.fn(value)
            if step.is_async:
                out = await out
        except OpenFunctionsError as exc:
            raise StepFailed(f"step {path} ({step.name}): {exc.message}",
                             details={"step": path, "name": step.name, "cause": exc.code}) from exc
        except Exception as exc:
            raise StepFailed(
                f"step {path} ({step.name}) raised {type(exc).__name__}: {exc}",
                details={"step": path, "name": step.name, "cause": type(exc).__name__},
            ) from exc
        if self.journal is not None:
            return self.journal.succeeded(path, step.name, out)
        try:
            check_json(out)
        except NonJsonValue as exc:
            raise StepOutputInvalid(
                f"step {path} ({step.name}) returned a value with no JSON form: {exc.message}",
                details={"step": path, "name": step.name, "cause": exc.code},
            ) from None
        return out

    async def llm(self, path: str, step: LLMStep, value: Any) -> Any:
        adapter = step.adapter or self.adapter
        if adapter is None:
            raise WorkflowDefinitionError(
                f"step {path} ({step.name}) is an LLM step and no adapter was given (pass adapter= to llm_step, pipe or run)"
            )
        try:
            messages = step.messages_for(value)
        except WorkflowError:
            raise
        except Exception as exc:
            raise StepFailed(f"step {path} ({step.name}): building the prompt raised {type(exc).__name__}: {exc}",
                             details={"step": path, "name": step.name, "cause": type(exc).__name__}) from exc
        if self.journal is not None:
            await self.journal.before_step(path, step.name, effect=False)
        attempt = 0
        while True:
            attempt += 1
            try:
                out = await self._ask(path, step, adapter, messages)
                break
            except StepFailed:
                # A model call has no effect: any failure may be retried.
                if attempt > step.retries:
                    raise
                await anyio.sleep(step.retry_delay)
        if self.journal is not None:
            # A model call costs time and money: make its answer durable now.
            out = self.journal.succeeded(path, step.name, out, attempt=attempt)
            await self.journal.flush()
        return out

    async def _ask(self, path: str, step: LLMStep, adapter: Any, messages: Any) -> Any:
        reply = None
        try:
            with anyio.move_on_after(step.timeout) if step.timeout is not None else contextlib.nullcontext():
                reply = await adapter.chat(messages, (), step.options)
        except OpenFunctionsError as exc:
            raise StepFailed(f"step {path} ({step.name}): the model call failed: {exc.message}",
                             details={"step": path, "name": step.name, "cause": exc.code}) from exc
        except Exception as exc:
            raise StepFailed(f"step {path} ({step.name}): the model call raised {type(exc).__name__}: {exc}",
                             details={"step": path, "name": step.name, "cause": type(exc).__name__}) from exc
        if reply is None:
            raise StepFailed(f"step {path} ({step.name}): the model did not answer within {step.timeout:g} s",
                             details={"step": path, "name": step.name, "cause": "workflow_step_timeout"})
        return step.parse(getattr(reply, "text", None), path)


# The start record a gated handler waits for (set around one executor call; a context variable,
# so parallel branches each see their own).
_GATE: contextvars.ContextVar[Any] = contextvars.ContextVar("openfunctions_workflow_gate")
_GATED: weakref.WeakKeyDictionary[ToolDefinition, ToolDefinition] = weakref.WeakKeyDictionary()


def _gated(tool: ToolDefinition) -> ToolDefinition:
    """``tool`` with a handler that waits for the current gate before running the real one.

    A copy with the original's fields (spec, capability, schemas): receipts bind the same spec
    digest. The handler is never called any other way than by the executor. One copy per tool,
    kept as long as the tool lives.
    """
    gated = _GATED.get(tool)
    if gated is None:
        inner = tool.handler

        async def handler(params: dict[str, Any], ctx: Any) -> Any:
            gate = _GATE.get(None)
            if gate is not None:
                try:
                    await asyncio.shield(gate)
                except Exception as exc:
                    raise ToolError(f"the workflow could not record the step's start, so the tool did not run: {exc}",
                                    code="workflow_journal_failed", effect_happened=False) from exc
            return await inner(params, ctx)

        # dataclasses.replace: the same fields (spec, capability, schemas) with another handler; the
        # copy's digest and validators are computed from the same fields, so receipts bind the same spec.
        gated = dataclasses.replace(tool, handler=handler)
        _GATED[tool] = gated
    return gated


async def _settle(fut: Any) -> None:
    try:
        await fut
    except Exception:  # reported by the journal's next append (fail-stop) or the run's close
        pass


def _tool_output(detailed: Any) -> Any:
    """A tool step's result: the handler's JSON value (the executor checked it has a JSON form);
    a :class:`ToolResult` gives its structured payload, else its text."""
    value = detailed.value
    if isinstance(value, ToolResult):
        if value.structured is not None:
            return value.structured
        return "\n".join(b.get("text", "") for b in value.content if b.get("type") == "text")
    return value


def compile_parts(parts: tuple[Any, ...], prefix: str) -> list[Node]:
    """The nodes of a sequence of parts (steps, nested workflows, parallels, branches)."""
    from ._workflow import Workflow, _BranchPart, _ParallelPart

    out: list[Node] = []
    for i, part in enumerate(parts):
        path = f"{prefix}{i}"
        out.append(_compile(part, path, Workflow, _ParallelPart, _BranchPart))
    return out


def _compile(part: Any, path: str, Workflow: Any, Par_: Any, Branch_: Any) -> Node:
    if isinstance(part, Step):
        return Leaf(path, part)
    if isinstance(part, Workflow):
        return Seq(path, compile_parts(part.parts, path + "."))
    if isinstance(part, Par_):
        return Par(path, [_compile(b, f"{path}.{j}", Workflow, Par_, Branch_) for j, b in enumerate(part.branches)])
    if isinstance(part, Branch_):
        t = _compile(part.if_true, f"{path}.t", Workflow, Par_, Branch_) if part.if_true is not None else None
        f = _compile(part.if_false, f"{path}.f", Workflow, Par_, Branch_) if part.if_false is not None else None
        return Branch(path, part.predicate, part.name, t, f)
    raise WorkflowDefinitionError(f"not a workflow part: {part!r}")  # pragma: no cover - coerced earlier


__all__ = ["Exec", "Node", "compile_parts"]
