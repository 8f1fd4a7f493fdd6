"""One verb per kind of factory, over every package's ``__all__`` (docs/API.md, "Naming").

- ``define_*``: a declaration; validates its arguments, does no I/O (so it is not async).
- ``create_*``: builds an object in memory (tools, an app, a server, an embedder, a record);
  acquires nothing the caller must release (an object with a lifecycle of its own acquires in
  its ``start()`` / ``async with``); not async (an await is I/O), exceptions listed below.
- ``open_*``: acquires files, locks, connections or a pool the caller must release
  (``aclose()`` / ``close()`` / ``destroy()`` / ``async with``); async.
- ``build_*_profile``: a server profile's builder, the hook ``openfunctions-mcp serve --profile``
  calls; the server starts and stops what it returns. ``build_`` means nothing else.
- ``load_*``: reads files, entry points or configuration once and returns what it read.
- ``new_*``: a fresh identifier; no I/O.
- ``start_*``: starts serving.

A name that starts with another factory-sounding verb (``make_``, ``get_or_create_``, ...) is
refused. Renamed names live on for one release in a package's ``_RENAMED`` table
(``openfunctions.core.deprecation``): not in ``__all__``, and each use warns.
"""

from __future__ import annotations

import importlib
import inspect
import re
import tomllib
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES: list[str] = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]

ALLOWED = ("define", "create", "open", "build", "load", "new", "start")
# Verbs that read as "make me one" but are not ours: a newcomer would not know which rule they follow.
REFUSED = ("make", "construct", "init", "setup", "get_or_create", "instantiate", "spawn", "produce", "generate")

# name -> why it may break the rule; add one only with a reason a newcomer would accept.
KNOWN_EXCEPTIONS: dict[str, str] = {
    "create_memory": "async only to load a named embedder off the event loop; the store is the caller's and "
                     "the Memory holds nothing else",
}


def _verb(name: str) -> str | None:
    for verb in sorted((*ALLOWED, *REFUSED), key=len, reverse=True):
        if name.startswith(verb + "_"):
            return verb
    return None


def verb_problems(exports: Mapping[str, Callable[..., Any]]) -> list[str]:
    """``name: what is wrong`` for each public function whose factory verb breaks the rule."""
    out = []
    for name, fn in sorted(exports.items()):
        verb = _verb(name)
        if verb is None or name in KNOWN_EXCEPTIONS or inspect.isclass(fn) or not callable(fn):
            continue
        is_async = inspect.iscoroutinefunction(fn)
        if verb in REFUSED:
            out.append(f"{name}: '{verb}_' is not one of our verbs ({', '.join(v + '_' for v in ALLOWED)})")
        elif verb == "build" and not name.endswith("_profile"):
            out.append(f"{name}: 'build_' is only for a server profile's builder (build_<name>_profile); "
                       "an object in memory is create_, one holding resources open_")
        elif verb == "open" and not is_async:
            out.append(f"{name}: an open_ function acquires resources, so it is async")
        elif verb in ("define", "new") and is_async:
            out.append(f"{name}: a {verb}_ function does no I/O, so it is not async")
        elif verb == "create" and is_async:
            out.append(f"{name}: a create_ function that awaits is doing I/O; one that leaves something to "
                       "release is open_ (or list it in KNOWN_EXCEPTIONS with the reason)")
    return out


def _public_functions() -> dict[str, dict[str, Any]]:
    """package -> {name: object} for the callables (not classes) in its ``__all__``."""
    out: dict[str, dict[str, Any]] = {}
    for package in PACKAGES:
        module = importlib.import_module(package)
        out[package] = {n: getattr(module, n) for n in getattr(module, "__all__", ())
                        if callable(getattr(module, n)) and not inspect.isclass(getattr(module, n))}
    return out


def test_every_public_factory_uses_one_of_the_allowed_verbs():
    functions = _public_functions()
    problems = [f"{package}.{p}" for package, names in functions.items() for p in verb_problems(names)]
    assert not problems, "\n".join(problems)
    # the check saw the factories it is about (a package list read wrong would pass vacuously)
    seen = {name for names in functions.values() for name in names}
    assert {"define_tool", "create_mcp_server", "open_store", "open_local_store", "build_work_profile",
            "new_id", "load_skills", "start_server"} <= seen


def test_the_verb_check_refuses_each_kind_of_mistake():
    def sync() -> None: ...

    async def coro() -> None: ...

    got = verb_problems({"make_store": sync, "build_tools": sync, "open_thing": sync, "define_thing": coro,
                         "new_token": coro, "create_app": sync, "open_pool": coro, "build_x_profile": sync,
                         "openly": sync, "load_config": sync, "get_or_create_x": sync, "create_store": coro,
                         "create_memory": coro})
    assert [g.split(":")[0] for g in got] == ["build_tools", "create_store", "define_thing", "get_or_create_x",
                                               "make_store", "new_token", "open_thing"]


def test_known_exceptions_still_exist():
    exported = {name for names in _public_functions().values() for name in names}
    assert not set(KNOWN_EXCEPTIONS) - exported, "an exception for a name nobody exports: drop it"


def _renamed() -> list[tuple[str, str, str]]:
    out = []
    for package in PACKAGES:
        table = getattr(importlib.import_module(package), "_RENAMED", None) or {}
        out += [(package, old, new) for old, new in table.items()]
    return out


def test_the_renamed_tables_are_found():
    found = {(p.rsplit(".", 1)[-1], old) for p, old, _ in _renamed()}
    assert {("store", "create_store"), ("chat", "create_chat_agent"), ("rag", "create_tools")} <= found


@pytest.mark.parametrize(("package", "old", "new"), _renamed(), ids=lambda v: str(v).rsplit(".", 1)[-1])
def test_an_old_name_warns_and_is_the_new_object(package: str, old: str, new: str):
    module = importlib.import_module(package)
    assert old not in module.__all__ and new in module.__all__
    assert old not in vars(module), "the old name must go through __getattr__ (so that it warns)"
    with pytest.warns(DeprecationWarning, match=rf"{re.escape(package)}\.{old} is deprecated.*use "
                                                rf"{re.escape(package)}\.{new}$") as caught:
        value = getattr(module, old)
    assert value is getattr(module, new)
    assert caught[0].filename == __file__  # the warning points at the caller's line
    namespace: dict[str, Any] = {}
    with pytest.warns(DeprecationWarning, match=f"use {re.escape(package)}.{new}"):
        exec(f"from {package} import {old}", namespace)  # noqa: S102  (our own constant text)
    assert namespace[old] is value
    # the new name obeys the rule the rename was for
    assert not verb_problems({new: value})


def test_an_unknown_name_is_still_an_attribute_error():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for package in {p for p, _, _ in _renamed()}:
            with pytest.raises(AttributeError, match="has no attribute 'nope'"):
                importlib.import_module(package).nope  # noqa: B018  (the lookup is the test)


def test_api_docs_state_the_rule_for_each_verb():
    text = (REPO / "docs" / "API.md").read_text(encoding="utf-8")
    section = text.split("## Naming", 1)[1].split("\n## ", 1)[0]
    for verb in ALLOWED:
        assert f"`{verb}_" in section, verb
    for package, old, new in _renamed():
        assert f"| `{package}.{old}` | `{new}` |" in section, (old, new)
