"""The tool registry: tools stored once, executed through one executor.

A projection (``registry.project(...)``) is a filtered *view*: it shares the
executor, and with it the policy, the scheduler and the journal sink. It is
not a second runtime, and it cannot register tools.
"""

from __future__ import annotations

import builtins
import difflib
from collections.abc import Iterable
from typing import Any

from ._context import ToolExecutionContext
from ._policy import Mode, Policy
from ._result import DetailedResult
from ._scheduler import DEFAULT_MAX_PARALLEL_WRITES, Scheduler
from ._sink import ExecutionObserver
from ._tool import ToolDefinition, describe_object
from .errors import DuplicateTool, OpenFunctionsError, ToolDefinitionError, ToolNotFound
from .executor import ToolExecutor


class ToolRegistry:
    def __init__(
        self,
        tools: Iterable[ToolDefinition] = (),
        *,
        executor: ToolExecutor | None = None,
        policy: Policy | None = None,
        mode: Mode = "local",
        scheduler: Scheduler | None = None,
        sink: ExecutionObserver | None = None,
        max_parallel: int = 8,
        max_parallel_writes: int = DEFAULT_MAX_PARALLEL_WRITES,
    ) -> None:
        self.executor = executor or ToolExecutor(
            policy=policy, mode=mode, scheduler=scheduler, sink=sink, max_parallel=max_parallel,
            max_parallel_writes=max_parallel_writes,
        )
        self._tools: dict[str, ToolDefinition] = {}
        self._sources: dict[str, str] = {}
        self._parent: ToolRegistry | None = None
        self._filter: tuple[frozenset[str] | None, frozenset[str] | None] = (None, None)
        for t in tools:
            self.register(t)

    # -- contents ---------------------------------------------------------

    def register(self, tool: ToolDefinition, *, source: str | None = None) -> ToolDefinition:
        """Add ``tool``. ``source`` (e.g. ``"--module mytools:registry"``) is named if its name is taken twice."""
        if self._parent is not None:
            raise ToolDefinitionError("a projection is a read-only view: register tools on the registry it came from")
        if not isinstance(tool, ToolDefinition):
            hint = " (decorate it with @tool or build it with define_tool)" if callable(tool) else ""
            raise ToolDefinitionError(f"register() takes a ToolDefinition, got {describe_object(tool)}{hint}")
        where = _origin(tool, source)
        if tool.name in self._tools:
            first = self._sources.get(tool.name, "?")
            raise DuplicateTool(
                f"a tool named {tool.name!r} is already registered (from {first}); this one is from {where}. "
                "Rename one, or load the tools once",
                details={"tool": tool.name, "sources": [first, where]},
            )
        self._tools[tool.name] = tool
        self._sources[tool.name] = where
        return tool

    def source_of(self, name: str) -> str | None:
        """Where the tool ``name`` came from, as given to :meth:`register` (or its handler's module)."""
        if self._parent is not None:
            return self._parent.source_of(name)
        return self._sources.get(name)

    def unregister(self, name: str) -> ToolDefinition:
        """Remove the tool named ``name`` (a mounted upstream withdrew it); calls already running finish."""
        if self._parent is not None:
            raise ToolDefinitionError("a projection is a read-only view: unregister tools on the registry it came from")
        try:
            removed = self._tools.pop(name)
        except (KeyError, TypeError):
            raise ToolNotFound(f"unknown tool {name!r}", details={"tool": str(name)}) from None
        self._sources.pop(name, None)
        return removed

    def _visible(self) -> dict[str, ToolDefinition]:
        if self._parent is None:
            return self._tools
        names, tags = self._filter
        out = {}
        for n, t in self._parent._visible().items():
            if names is not None and n not in names:
                continue
            if tags is not None and not (tags & set(t.tags)):
                continue
            out[n] = t
        return out

    def get(self, name: str) -> ToolDefinition:
        tools = self._visible()
        t = tools.get(name) if isinstance(name, str) else None
        if t is None:
            shown = name if isinstance(name, str) else repr(name)
            shown = shown if len(shown) <= 128 else shown[:125] + "..."
            close = difflib.get_close_matches(shown, list(tools), n=3, cutoff=0.6) if isinstance(name, str) else []
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ToolNotFound(f"unknown tool {shown!r}{hint}", details={"tool": shown, "candidates": close})
        return t

    def list(self) -> list[ToolDefinition]:
        return list(self._visible().values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._visible()

    def __len__(self) -> int:
        return len(self._visible())

    def project(self, *, names: Iterable[str] | None = None, tags: Iterable[str] | None = None) -> ToolRegistry:
        """A filtered view sharing this registry's executor services."""
        view = ToolRegistry.__new__(ToolRegistry)
        view.executor = self.executor
        view._tools = {}
        view._sources = {}
        view._parent = self
        view._filter = (frozenset(names) if names is not None else None, frozenset(tags) if tags is not None else None)
        return view

    # -- execution --------------------------------------------------------

    async def execute_detailed(
        self, name: str, params: Any = None, context: ToolExecutionContext | None = None
    ) -> DetailedResult:
        """Run a tool; return model content, structured payload and receipt.

        Raises only :class:`ToolNotFound` (there is no spec to bind a receipt
        to); every other failure is in the result's ``error`` and receipt.
        """
        return await self.executor.execute_detailed(self.get(name), params, context)

    async def execute(self, name: str, params: Any = None, context: ToolExecutionContext | None = None) -> Any:
        """Run a tool and return the handler's ordinary result; raise its error."""
        detailed = await self.execute_detailed(name, params, context)
        if detailed.error is not None:
            raise detailed.error
        return detailed.value

    # -- provider formats (pure translations) -----------------------------

    def to_openai_format(self) -> builtins.list[dict[str, Any]]:
        from ._providers import to_openai

        return [to_openai(t) for t in self.list()]

    def to_anthropic_format(self) -> builtins.list[dict[str, Any]]:
        from ._providers import to_anthropic

        return [to_anthropic(t) for t in self.list()]

    def to_gemini_format(self) -> dict[str, Any]:
        from ._providers import to_gemini

        return to_gemini(self.list())


def _origin(tool: ToolDefinition, source: str | None) -> str:
    fn: Any = tool.handler
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    defined = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', '?')}"
    return f"{source} ({defined})" if source else defined


__all__ = ["ToolRegistry", "OpenFunctionsError"]
