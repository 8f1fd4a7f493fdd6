"""Static checks, run inside the test suite (so the README's test command and .ci/run include them).

* ruff with the rules of ``[tool.ruff.lint]`` (pyflakes, bugbear, import order,
  pyupgrade, line length, McCabe complexity): the whole tree passes every rule
  (the per-file exceptions are in ``[tool.ruff.lint.per-file-ignores]`` with their reasons).
* mypy, strict on the packages ``[tool.mypy]`` lists, with no per-module relaxation
  of strictness (the packages not listed yet are read for their types, their own errors unreported).

mypy checks each package under its installed name (``openfunctions.core``, ...). The
repository keeps the packages at the top level and setuptools maps them
(``[tool.setuptools.package-dir]``), a mapping mypy cannot read; so the check builds a
tree of symlinks laid out as installed, ``openfunctions/core -> <repo>/core`` and so on,
and runs mypy inside it. Without it ``from openfunctions.core import ToolDefinition`` in
``artifacts/`` would resolve to nothing and be read as ``Any``. To run the same check
by hand: ``python tests/test_static_checks.py`` (extra arguments go to mypy).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(*argv: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=cwd, capture_output=True, text=True, timeout=600)


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("ruff", reason="the test extra installs ruff")
    return _run("ruff", "check", "--no-cache", "--output-format", "concise", *args)


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def build_installed_tree(root: Path) -> Path:
    """Lay out ``root/openfunctions`` as the wheel installs it, each entry a symlink into the repository."""
    package_dir: dict[str, str] = _pyproject()["tool"]["setuptools"]["package-dir"]
    top = root / "openfunctions"
    top.mkdir()
    for source in (REPO / package_dir["openfunctions"]).glob("*.py"):
        (top / source.name).symlink_to(source)
    for name, folder in package_dir.items():
        parts = name.split(".")
        # nested packages (openfunctions.core.journal) live inside their parent's folder already
        if len(parts) == 2:
            (top / parts[1]).symlink_to(REPO / folder, target_is_directory=True)
    return root


def run_mypy(*extra: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="openfunctions-mypy-") as tmp:
        tree = build_installed_tree(Path(tmp))
        return _run("mypy", "--config-file", str(REPO / "pyproject.toml"), "--no-incremental",
                    "--cache-dir", os.devnull, *extra, cwd=tree)


def test_ruff_passes_every_rule_on_the_whole_tree():
    proc = _ruff(".")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_the_tree_maps_every_package_of_the_wheel():
    # a package added to [tool.setuptools] but missing from the tree would be read as Any by mypy
    config = _pyproject()["tool"]["setuptools"]
    with tempfile.TemporaryDirectory() as tmp:
        tree = build_installed_tree(Path(tmp))
        for package in config["packages"]:
            init = tree.joinpath(*package.split("."), "__init__.py")
            assert init.is_file(), f"{package} is not reachable in the mypy tree at {init}"


def test_mypy_strict_on_the_listed_packages():
    pytest.importorskip("mypy", reason="the test extra installs mypy")
    proc = run_mypy()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "no issues found" in proc.stdout


if __name__ == "__main__":
    done = run_mypy(*sys.argv[1:])
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    sys.exit(done.returncode)
