"""openfunctions: the public API, one import away.

::

    from openfunctions import serve, tool

    @tool
    def add(a: int, b: int) -> int:
        \"\"\"Add two numbers.\"\"\"
        return a + b

    if __name__ == "__main__":
        serve(add)  # stdio: what an MCP host launches

Every name below lives in one of the subpackages (``openfunctions.core``,
``openfunctions.agents``, ...; docs/API.md says which) and is imported from
there the first time it is used (PEP 562), so ``import openfunctions`` costs
almost nothing and optional dependencies (httpx, psycopg, numpy) load only
when a name that needs them does. The subpackages stay importable as before;
this module only re-exports the names a user needs most.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# name -> the module that defines it. Keep it small: the names a newcomer needs to write a tool, serve it,
# build an agent or a workflow, open state and catch the errors they will meet. docs/API.md lists the same.
_EXPORTS: dict[str, str] = {
    # tools
    "tool": "openfunctions.core",
    "define_tool": "openfunctions.core",
    "ToolDefinition": "openfunctions.core",
    "ToolRegistry": "openfunctions.core",
    "ToolExecutionContext": "openfunctions.core",
    "Capability": "openfunctions.core",
    # serving
    "serve": "openfunctions._serve",
    "create_mcp_server": "openfunctions.servers",
    "start_server": "openfunctions.servers",
    # agents and the models they think with
    "Agent": "openfunctions.agents",
    "Crew": "openfunctions.agents",
    "AgentRuntime": "openfunctions.agents",
    "define_agent": "openfunctions.agents",
    "define_crew": "openfunctions.agents",
    "run_agent": "openfunctions.agents",
    "ScriptedAdapter": "openfunctions.adapters",
    "resolve_adapter": "openfunctions.adapters",
    # workflows
    "Workflow": "openfunctions.workflows",
    "WorkflowRuns": "openfunctions.workflows",
    "pipe": "openfunctions.workflows",
    "tool_step": "openfunctions.workflows",
    "llm_step": "openfunctions.workflows",
    "transform": "openfunctions.workflows",
    # state, retrieval, upstream servers
    "open_store": "openfunctions.store",
    "create_memory": "openfunctions.memory",
    "open_rag": "openfunctions.rag",
    "Gateway": "openfunctions.providers",
    # errors a caller catches (each has a stable ``code``)
    "OpenFunctionsError": "openfunctions.core",
    "ToolError": "openfunctions.core",
    "ToolDefinitionError": "openfunctions.core",
    "ToolNotFound": "openfunctions.core",
    "InvalidParams": "openfunctions.core",
    "PolicyDenied": "openfunctions.core",
    "ToolFailed": "openfunctions.core",
}

__all__ = sorted([*_EXPORTS, "__version__"])


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(import_module(_EXPORTS[name]), name)
    elif name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("openfunctions-mcp")
        except PackageNotFoundError:  # pragma: no cover - a bare checkout, never installed
            value = "0.0.0"
    elif name.isidentifier() and not name.startswith("_"):
        # `openfunctions.core` and the other subpackages also resolve as attributes after a bare `import openfunctions`
        try:
            value = import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise  # the subpackage exists and lacks a dependency: say that, not "no attribute"
            raise AttributeError(f"module 'openfunctions' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'openfunctions' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
