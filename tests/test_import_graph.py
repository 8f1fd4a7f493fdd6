"""The packages import downwards only, and their import graph has no cycle.

DESIGN's direction of dependencies, as data (``TIERS``, top first)::

    openfunctions (the front door) -> ui -> servers -> plugins
        -> (agents, workflows, chat, memory, rag, providers, skills) -> (adapters, store, work) -> artifacts -> core

(DESIGN names the tiers from ``servers`` down; the front door, ``ui`` (the viewer over every layer's records) and ``plugins``, the entry-point loader, which
imports what it loads, are placed here.)

A package may import a package of a lower tier. An import of its own tier
(a sibling) or of a higher one is a violation; a module that needs to reach up
takes a Protocol instead. Today's violations are listed in
``KNOWN_VIOLATIONS``, one entry per importing module and imported package,
each with its reason, so that a new one fails here and a fixed one must leave
the list (a stale entry fails too). Imports are read from the source with
``ast``, nothing is imported: ``import``/``from`` statements anywhere in a
module (inside functions and ``TYPE_CHECKING`` blocks too: a dependency is a
dependency), relative ones resolved, and ``import_module("openfunctions.x...")``
calls with a constant name.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

TIERS: list[tuple[str, ...]] = [
    ("openfunctions",),  # the root package: the public API re-exports names from every package below
    ("ui",),  # the viewer reads every layer's records and serves them behind the servers' HTTP guard
    ("chat",),  # a chat agent and its HTTP app: composes agents, memory, context providers and the servers' guard
    ("servers",),
    ("plugins",),  # loads entry points into the layers below (tools, context providers, skills, prompts)
    ("providers",),  # context providers (the reference vault reads notes with skills' frontmatter parser)
    ("skills",),
    ("engine",),  # an agent session over stdin/stdout JSONL: a model and tools
    ("agents",),  # an agent run is admitted like a workflow run (begin_run, child_context)
    ("workflows", "memory", "rag"),
    ("adapters", "store", "work"),
    ("artifacts",),
    ("core",),
]
# where each package's source lives in the repository (installed: openfunctions.<name>)
SOURCES = {name: REPO / name for tier in TIERS for name in tier}

# (importing module, imported package): why it is there today. Remove an entry with the import it excuses.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {
}


def _tier_of(package: str) -> int:
    tier = next((i for i, names in enumerate(TIERS) if package in names), None)
    assert tier is not None, f"package {package!r} is in no tier: place it in TIERS (and DESIGN's direction)"
    return tier


def _module_name(package: str, path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SOURCES[package]).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    prefix = ["openfunctions"] if package == "openfunctions" else ["openfunctions", package]
    return ".".join(prefix + parts), is_package


def _imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, int]]:
    """Every ``openfunctions...`` module name ``tree`` imports, with its line."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                if node.module:
                    out.append((".".join([*base, node.module]), node.lineno))
                else:
                    out += [(".".join([*base, alias.name]), node.lineno) for alias in node.names]
            elif node.module:
                out.append((node.module, node.lineno))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)
              and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) in ("import_module", "__import__")):
            out.append((node.args[0].value, node.lineno))
    return [(name, line) for name, line in out if name.split(".")[0] == "openfunctions"]


def _package_of(name: str) -> str:
    """``openfunctions.core._x`` -> ``core``; ``openfunctions`` and its private modules (``_serve``) -> the root."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and not parts[1].startswith("_") else "openfunctions"


def import_edges() -> dict[tuple[str, str], list[str]]:
    """(importing module, imported package) -> the places ("path:line"), for imports across packages."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for package, source in SOURCES.items():
        if not source.is_dir():
            continue  # a package of the plan not written yet
        files = source.glob("*.py") if package == "openfunctions" else source.rglob("*.py")
        for path in sorted(files):
            module, is_package = _module_name(package, path)
            for name, line in _imported(ast.parse(path.read_text(), str(path)), module, is_package):
                target = _package_of(name)
                if target != package:
                    edges[(module, target)].append(f"{path.relative_to(REPO)}:{line}")
    return edges


def _violations(edges: dict[tuple[str, str], list[str]]) -> dict[tuple[str, str], list[str]]:
    return {(module, target): where for (module, target), where in edges.items()
            if _tier_of(target) <= _tier_of(_package_of(module))}


def test_every_package_folder_is_placed_in_a_tier():
    import tomllib

    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    top = {p.split(".")[1] if "." in p else p for p in packages}
    assert top <= set(SOURCES), f"a package missing from TIERS: {sorted(top - set(SOURCES))}"


def test_no_package_imports_upwards_or_sideways_except_the_known_violations():
    found = _violations(import_edges())
    new = {k: v for k, v in found.items() if k not in KNOWN_VIOLATIONS}
    assert not new, "imports against the declared direction (take a Protocol, or move the code down): " + "; ".join(
        f"{module} -> {target} at {', '.join(where)}" for (module, target), where in sorted(new.items()))
    stale = sorted(set(KNOWN_VIOLATIONS) - set(found))
    assert not stale, f"fixed, so remove from KNOWN_VIOLATIONS: {stale}"


def test_the_package_graph_has_no_cycle():
    """Over every edge but the excused ones (one of which closes a cycle today: see its reason)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for module, target in import_edges():
        if (module, target) not in KNOWN_VIOLATIONS:
            graph[_package_of(module)].add(target)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_the_checker_sees_each_kind_of_import(tmp_path):
    """The reader itself: absolute, relative (resolved), inside a function, and import_module with a constant."""
    source = (
        "import openfunctions.store\n"
        "from ..work import x\n"
        "from .. import servers\n"
        "def f():\n    from openfunctions.agents import y\n"
        "import importlib\nimportlib.import_module('openfunctions.rag._x')\n"
        "import json\n"
    )
    got = _imported(ast.parse(source), "openfunctions.core._mod", is_package=False)
    assert sorted((_package_of(n), line) for n, line in got) == [
        ("agents", 5), ("rag", 7), ("servers", 3), ("store", 1), ("work", 2)]
    assert set(_violations({("openfunctions.core._mod", _package_of(n)): [] for n, _ in got})) == {
        ("openfunctions.core._mod", p) for p in ("agents", "rag", "servers", "store", "work")}
    # downward and same-package imports are fine
    assert not _violations({("openfunctions.servers._x", "core"): [], ("openfunctions.chat._x", "adapters"): []})
    assert _violations({("openfunctions.store._x", "openfunctions"): []})  # nothing imports the front door
    assert _package_of("openfunctions._serve") == "openfunctions" and _package_of("openfunctions.new") == "new"
    with pytest.raises(AssertionError, match="package 'new' is in no tier"):
        _violations({("openfunctions.store._x", "new"): []})
