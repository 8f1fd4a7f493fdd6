"""Every project tool defined with ``@tool``, built offline: the subjects of test_tool_conversions.py.

The reference providers are connected over empty (but valid) folders, the RAG
tools over an empty embedded index (closed again: only the specs are read) and
the memory tools over a memory without a store: a tool's spec does not depend
on the data under it. ``of_list_dir``'s description
names its root; :func:`spec_of` writes it as ``<ROOT>``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from openfunctions.core import ToolDefinition


async def converted_tools(tmp: Path) -> list[ToolDefinition]:
    from openfunctions.agents.demo import count_words
    from openfunctions.memory import Memory, create_memory_tools
    from openfunctions.providers.reference import CalendarProvider, GitProvider, TasksProvider, VaultProvider
    from openfunctions.rag import create_rag_tools, open_rag
    from openfunctions.servers._example_tools import example_tools
    from openfunctions.skills import SkillSet, skill_tools

    for sub in ("files", "vault", "repo", "cal", "tasks"):
        (tmp / sub).mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(tmp / "repo")], check=True)
    tools = [*example_tools(files_root=tmp / "files"), *skill_tools(SkillSet()), count_words]
    for provider in (VaultProvider(tmp / "vault"), GitProvider(tmp / "repo"), CalendarProvider(tmp / "cal"),
                     TasksProvider(tmp / "tasks")):
        tools += (await provider.connect()).create_tools()
    rag = await open_rag(data_dir=tmp / "rag")
    await rag.aclose()
    return [*tools, *create_rag_tools(rag), *create_memory_tools(Memory(None))]


def spec_of(t: ToolDefinition, tmp: Path) -> dict[str, Any]:
    """What must not change when a tool moves to ``@tool``: its spec, its test cases' names, its null-as-absent set."""
    spec = t.spec()
    spec["description"] = spec["description"].replace(str((tmp / "files").resolve()), "<ROOT>")
    cases = [{"name": c.name, "arguments": dict(c.arguments), "error": c.error} for c in t.tests]
    return {"spec": spec, "tests": cases, "null_as_absent": sorted(t.null_as_absent)}
