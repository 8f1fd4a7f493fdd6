"""One code, one error; one public name, one thing.

Every ``OpenFunctionsError`` subclass in every package (all their modules
imported) defines its own ``code``, a snake_case string no other class uses:
a caller, a log query or a client that branches on ``code`` must never have
to ask which of two errors it was. And no two packages export (in
``__all__``) different objects under one name, so that ``from a import X`` and
``from b import X`` never mean two things; re-exporting the same object is
fine, and so is one plain value (a string, a number) defined twice. Today's collisions are listed in ``KNOWN_NAME_COLLISIONS`` with their
reasons (renaming them is its own change), so a new one fails here, and a
resolved one must leave the list.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

from openfunctions.core import OpenFunctionsError

REPO = Path(__file__).resolve().parents[1]
# the top-level subpackages, as pyproject ships them (a new one is covered without editing this test)
PACKAGES = sorted({p.split(".")[1] for p in tomllib.loads((REPO / "pyproject.toml").read_text())
                   ["tool"]["setuptools"]["packages"] if p.count(".") >= 1})

# name -> (the packages exporting different objects under it, why it stays for now)
KNOWN_NAME_COLLISIONS: dict[str, tuple[frozenset[str], str]] = {
    "ArtifactStoreProtocol": (frozenset({"artifacts", "work"}),
                              "work declares the narrower store interface it needs (put/stat) beside artifacts' own"),
    "TERMINAL": (frozenset({"agents", "work"}), "the terminal states of an agent run vs of a work attempt"),
}


def _import_everything() -> list[str]:
    """Import every module of every package; return those that failed for want of an optional dependency."""
    missing = []
    for name in PACKAGES:
        package = importlib.import_module(f"openfunctions.{name}")
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if info.name.endswith(".__main__"):
                continue  # runs the command
            try:
                importlib.import_module(info.name)
            except ModuleNotFoundError as exc:
                if (exc.name or "").startswith("openfunctions"):
                    raise
                missing.append(f"{info.name} ({exc.name})")
    return missing


def _subclasses(cls: type) -> set[type]:
    out = set()
    for sub in cls.__subclasses__():
        out |= {sub, *_subclasses(sub)}
    return out


def _error_classes() -> list[type]:
    missing = _import_everything()
    assert not missing, f"modules not imported (the test extra installs their dependencies): {missing}"
    return sorted((c for c in _subclasses(OpenFunctionsError) if c.__module__.startswith("openfunctions.")),
                  key=lambda c: (c.__module__, c.__qualname__))


def duplicate_codes(classes: list[type]) -> dict[str, list[str]]:
    by_code: dict[str, list[str]] = defaultdict(list)
    for cls in classes:
        by_code[cls.__dict__.get("code")].append(f"{cls.__module__}.{cls.__qualname__}")
    return {code: names for code, names in by_code.items() if len(names) > 1}


def test_every_error_class_defines_a_snake_case_code_of_its_own():
    classes = _error_classes()
    assert len(classes) > 100, "the walk found too few error classes: did the imports fail?"
    for cls in [OpenFunctionsError, *classes]:
        code = cls.__dict__.get("code")
        assert isinstance(code, str) and re.fullmatch(r"[a-z][a-z0-9_]*", code), (
            f"{cls.__module__}.{cls.__qualname__} defines no code of its own (inheriting one makes two errors one)")


def test_no_two_error_classes_share_a_code():
    dupes = duplicate_codes([OpenFunctionsError, *_error_classes()])
    assert not dupes, "codes used by two error classes: " + "; ".join(
        f"{code}: {', '.join(names)}" for code, names in sorted(dupes.items()))


def test_the_duplicate_check_fails_on_two_classes_with_one_code():
    class First(OpenFunctionsError):
        code = "door_probe_same"

    class Second(OpenFunctionsError):
        code = "door_probe_same"

    assert set(duplicate_codes([First, Second])) == {"door_probe_same"}


def exported_collisions(exports: dict[str, dict[str, object]]) -> dict[str, frozenset[str]]:
    """name -> the packages whose ``__all__`` binds it to different objects."""
    by_name: dict[str, dict[str, object]] = defaultdict(dict)
    for package, names in exports.items():
        for name, value in names.items():
            by_name[name][package] = value
    return {name: frozenset(where) for name, where in by_name.items()
            if len(where) > 1 and not _one_thing(list(where.values()))}


def _one_thing(values: list[object]) -> bool:
    """The same object, or the same plain value (a group name string defined in two modules is one thing)."""
    first = values[0]
    if all(v is first for v in values):
        return True
    plain = (str, int, float, bytes, tuple, frozenset)
    return all(type(v) is type(first) and isinstance(v, plain) and v == first for v in values)


def test_no_two_packages_export_different_things_under_one_name():
    exports = {}
    for name in PACKAGES:
        module = importlib.import_module(f"openfunctions.{name}")
        exports[name] = {n: getattr(module, n) for n in module.__all__}
    found = exported_collisions(exports)
    unexcused = {n: sorted(w) for n, w in found.items()
                 if n not in KNOWN_NAME_COLLISIONS or not w <= KNOWN_NAME_COLLISIONS[n][0]}
    assert not unexcused, f"one public name, two different objects (rename one, or re-export the same): {unexcused}"
    stale = sorted(set(KNOWN_NAME_COLLISIONS) - set(found))
    assert not stale, f"resolved, so remove from KNOWN_NAME_COLLISIONS: {stale}"


def test_the_collision_check_tells_a_re_export_from_a_second_object():
    a, b = object(), object()
    assert exported_collisions({"x": {"Same": a, "Other": a, "GROUP": "g", "STATES": ("a",)},
                                "y": {"Same": a, "Other": b, "GROUP": "g", "STATES": frozenset({"a"})}}) == {
        "Other": frozenset({"x", "y"}), "STATES": frozenset({"x", "y"})}


@pytest.mark.parametrize("package", PACKAGES)
def test_each_packages_all_names_exist(package):
    module = importlib.import_module(f"openfunctions.{package}")
    assert len(module.__all__) == len(set(module.__all__)), f"{package}.__all__ lists a name twice"
    for name in module.__all__:
        assert hasattr(module, name), f"openfunctions.{package}.__all__ names {name!r}, which it lacks"
