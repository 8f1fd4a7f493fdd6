"""The builder: ``pipe(...)``, ``.then``, ``.parallel``, ``.branch``; a workflow as a tool.

A :class:`Workflow` is immutable: each builder method returns a new one, so
a shared prefix can be extended in several ways. The control flow is fixed
by code ("deterministic composition"); only LLM steps are adaptive.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from openfunctions.adapters import AIAdapter
from openfunctions.core import Capability, ToolDefinition, ToolExecutionContext, define_tool, digest
from openfunctions.core.errors import ToolError

from ._admission import begin_run
from ._errors import WorkflowDefinitionError, WorkflowError
from ._plan import Exec, Seq, compile_parts
from ._steps import Step, ToolStep, Transform, _fn_name

_WORKFLOW_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")


@dataclass(frozen=True, slots=True)
class _ParallelPart:
    branches: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class _BranchPart:
    predicate: Callable[[Any], Any]
    name: str
    if_true: Any
    if_false: Any


def _coerce(part: Any, what: str) -> Any:
    if isinstance(part, (Step, Workflow)):
        return part
    if isinstance(part, ToolDefinition):
        return ToolStep(part.name)
    if callable(part):
        return Transform(part)
    raise WorkflowDefinitionError(
        f"{what}: expected a step (tool_step, transform, llm_step), a workflow, a ToolDefinition or a function, "
        f"got {type(part).__name__}"
    )


class Workflow:
    """A sequence of parts. Build with :func:`pipe`; run with :meth:`run` (in memory) or through a
    :class:`~openfunctions.workflows.WorkflowRuns` (durable)."""

    __slots__ = ("parts", "name", "registry", "adapter", "_root", "_digest", "_has_tools")

    def __init__(self, parts: tuple[Any, ...], *, name: str | None = None, registry: Any = None, adapter: AIAdapter | None = None) -> None:
        if name is not None and (not isinstance(name, str) or not _WORKFLOW_NAME_RE.match(name)):
            raise WorkflowDefinitionError(f"workflow name {name!r} is invalid: use 1-128 characters of A-Z, a-z, 0-9, '_', '.', '-'")
        self.parts = parts
        self.name = name
        self.registry = registry
        self.adapter = adapter
        self._root: Seq | None = None
        self._digest: str | None = None
        self._has_tools: bool | None = None

    # -- building -------------------------------------------------------------

    def _with(self, part: Any) -> Workflow:
        return Workflow((*self.parts, part), name=self.name, registry=self.registry, adapter=self.adapter)

    def then(self, step: Any) -> Workflow:
        """Append a step (or a nested workflow, a ToolDefinition, a function) fed the previous result."""
        return self._with(_coerce(step, "then()"))

    def parallel(self, *steps: Any) -> Workflow:
        """Run ``steps`` concurrently on the previous result; the result is their results, in order.
        The first failure cancels the others and fails the workflow."""
        if not steps:
            raise WorkflowDefinitionError("parallel() needs at least one step")
        return self._with(_ParallelPart(tuple(_coerce(s, f"parallel() branch {i}") for i, s in enumerate(steps))))

    def branch(self, predicate: Callable[[Any], Any], if_true: Any = None, if_false: Any = None, *, name: str | None = None) -> Workflow:
        """Run ``if_true`` or ``if_false`` (each a step or workflow; ``None`` passes the value through)
        depending on ``predicate(previous result)``, which must be a pure function of it."""
        if not callable(predicate):
            raise WorkflowDefinitionError(f"branch() needs a callable predicate, got {type(predicate).__name__}")
        t = _coerce(if_true, "branch() if_true") if if_true is not None else None
        f = _coerce(if_false, "branch() if_false") if if_false is not None else None
        return self._with(_BranchPart(predicate, name or _fn_name(predicate), t, f))

    def named(self, name: str) -> Workflow:
        """The same workflow under ``name`` (durable runs find their workflow by name)."""
        return Workflow(self.parts, name=name, registry=self.registry, adapter=self.adapter)

    def bind(self, *, registry: Any = None, adapter: AIAdapter | None = None) -> Workflow:
        """The same workflow with a default registry and/or adapter."""
        return Workflow(self.parts, name=self.name, registry=registry if registry is not None else self.registry,
                        adapter=adapter if adapter is not None else self.adapter)

    # -- identity ---------------------------------------------------------------

    def describe(self) -> list[Any]:
        """The canonical description of the steps (what the digest covers)."""
        return [_describe(p) for p in self.parts]

    @property
    def digest(self) -> str:
        if self._digest is None:
            self._digest = digest(self.describe())
        return self._digest

    @property
    def root(self) -> Seq:
        if self._root is None:
            self._root = Seq("", compile_parts(self.parts, ""))
        return self._root

    @property
    def has_tool_steps(self) -> bool:
        if self._has_tools is None:
            self._has_tools = any(isinstance(s, ToolStep) for s in _steps(self.parts))
        return self._has_tools

    # -- running ----------------------------------------------------------------

    async def run(self, input: Any = None, *, registry: Any = None, adapter: AIAdapter | None = None,
                  context: ToolExecutionContext | None = None) -> Any:
        """Run once, in memory (nothing journaled), and return the last step's result.

        Raises :class:`StepFailed` (naming the step) or another :class:`WorkflowError`.
        Cancelling the caller cancels the running step.
        """
        ex = self.executor(registry=registry, adapter=adapter, context=context, journal=None)
        return await self.root.run(ex, input)

    def executor(self, *, registry: Any, adapter: Any, context: ToolExecutionContext | None, journal: Any) -> Exec:
        registry = registry if registry is not None else self.registry
        if registry is None and self.has_tool_steps:
            raise WorkflowDefinitionError(
                f"workflow {self.name or '(unnamed)'} has tool steps and no registry (pass registry= to pipe, bind or run)"
            )
        return Exec(registry, adapter if adapter is not None else self.adapter, context, journal)

    # -- as a tool --------------------------------------------------------------

    def as_tool(
        self,
        name: str,
        input_schema: Mapping[str, Any] | None = None,
        *,
        description: str | None = None,
        output_schema: Mapping[str, Any] | None = None,
        registry: Any = None,
        adapter: AIAdapter | None = None,
        runs: Any = None,
        capability: Capability | Mapping[str, Any] | None = None,
        tags: Sequence[str] = ("workflow",),
        admission: Literal["per_call", "run"] = "per_call",
    ) -> ToolDefinition:
        """This workflow as a :class:`ToolDefinition` whose arguments are the workflow's input.

        Register it in a registry (or serve it: ``openfunctions-mcp serve --module pkg.mod:attr``
        serves a list of ToolDefinitions) and agents call it like any tool. Their receipts link to
        the workflow call's receipt. ``admission``: ``"per_call"`` (the default) — the workflow's own
        call gives its scheduler reservation back as soon as its handler starts and each tool step is
        admitted on its own (a write step still runs alone; nothing is held while an LLM step or a
        model-backed step waits); ``"run"`` — the call keeps its reservation for the whole run and its
        steps run inside it (child executions), e.g. read-then-write steps that must run as one unit
        (an unclassified workflow then holds the write barrier throughout). Either way a read
        (parallel-safe) capability cannot run write steps (AdmissionRefused, with a receipt).
        With ``runs`` (a :class:`WorkflowRuns`) every call is a durable run, and a server serving the
        tool starts the runs (``runs.start()``: resuming interrupted runs) and closes them. A failed run raises a
        ``ToolError`` carrying the step's error code; its effects are ``unknown``.
        """
        if admission not in ("per_call", "run"):
            raise WorkflowDefinitionError(f"as_tool: admission must be 'per_call' or 'run', not {admission!r}")
        hold = admission == "run"
        wf = self if self.name is not None else self.named(name)
        wf_registry = registry
        if runs is not None:
            # Registered now, with its registry and adapter bound, so that the runs can resume it on
            # start (a server calls ``handler.on_server_start``) before any call names it.
            if registry is not None or adapter is not None:
                wf = wf.bind(registry=registry, adapter=adapter)
            runs.register(wf)

        async def handler(params: dict[str, Any], ctx: ToolExecutionContext) -> Any:
            ctx = begin_run(ctx, hold=hold)
            try:
                if runs is not None:
                    outcome = await runs.run(wf, params, context=ctx, registry=wf_registry, adapter=adapter)
                    return outcome.unwrap()
                return await wf.run(params, registry=wf_registry, adapter=adapter, context=ctx)
            except WorkflowError as exc:
                raise ToolError(exc.message, code=exc.code, details=exc.details) from exc

        if runs is not None:
            # A server serving this tool opens the runs (resuming interrupted ones) on start and closes
            # them on shutdown (servers/profiles.build_profile looks for these).
            handler.on_server_start = runs.start  # type: ignore[attr-defined]
            handler.on_server_close = runs.close  # type: ignore[attr-defined]
            # ... and, if ``runs`` were built without a location (``WorkflowRuns()``), gives them its own first:
            # ``serve --database URL``'s PostgreSQL, else its data dir (WorkflowRuns.place)
            handler.on_server_place = runs.place  # type: ignore[attr-defined]
        return define_tool(
            name=name,
            description=description or f"Workflow {wf.name}: {len(self.parts)} step(s)",
            input_schema=input_schema if input_schema is not None else {"type": "object"},
            output_schema=output_schema,
            handler=handler,
            tags=tags,
            capability=capability,
            meta={"dev.openfunctions/workflow": {"name": wf.name, "digest": self.digest}},
        )

    def __repr__(self) -> str:
        return f"<Workflow {self.name or '(unnamed)'} {len(self.parts)} part(s)>"


def _describe(part: Any) -> Any:
    if isinstance(part, Step):
        return part.describe()
    if isinstance(part, Workflow):
        return {"kind": "pipe", "steps": part.describe()}
    if isinstance(part, _ParallelPart):
        return {"kind": "parallel", "branches": [_describe(b) for b in part.branches]}
    if isinstance(part, _BranchPart):
        return {
            "kind": "branch", "name": part.name,
            "if_true": _describe(part.if_true) if part.if_true is not None else None,
            "if_false": _describe(part.if_false) if part.if_false is not None else None,
        }
    raise WorkflowDefinitionError(f"not a workflow part: {part!r}")  # pragma: no cover


def _steps(parts: tuple[Any, ...]) -> Iterator[Step]:
    """Every step in ``parts``, depth first."""
    for part in parts:
        if isinstance(part, Step):
            yield part
        elif isinstance(part, Workflow):
            yield from _steps(part.parts)
        elif isinstance(part, _ParallelPart):
            yield from _steps(part.branches)
        elif isinstance(part, _BranchPart):
            yield from _steps(tuple(p for p in (part.if_true, part.if_false) if p is not None))


def pipe(*steps: Any, name: str | None = None, registry: Any = None, adapter: AIAdapter | None = None) -> Workflow:
    """A workflow of ``steps`` in sequence, each fed the previous one's result.

    A step is a :func:`tool_step`, :func:`transform`, :func:`llm_step`, a nested workflow, a
    ``ToolDefinition`` (a tool step by its name) or a plain function (a transform). ``name`` is
    needed for durable runs (a run finds its workflow by name when it resumes); ``registry``
    (tool steps) and ``adapter`` (LLM steps) are defaults a run may override.
    """
    return Workflow(tuple(_coerce(s, f"pipe() step {i}") for i, s in enumerate(steps)), name=name, registry=registry, adapter=adapter)


__all__ = ["Workflow", "pipe"]
