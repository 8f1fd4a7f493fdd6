"""Static checks, run inside the test suite (so the README's test command and .ci/run include them).

* ruff with the rules of ``[tool.ruff.lint]`` (pyflakes, bugbear, import order,
  pyupgrade): the whole tree passes every rule (the one exception,
  B023 under bench/, is in ``[tool.ruff.lint.per-file-ignores]`` with its reason).
* mypy, strict on ``core/`` (``[tool.mypy]``), with no per-module relaxation.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=600)


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("ruff", reason="the test extra installs ruff")
    return _run("ruff", "check", "--no-cache", "--output-format", "concise", *args)


def test_ruff_passes_every_rule_on_the_whole_tree():
    proc = _ruff(".")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_mypy_strict_on_core():
    pytest.importorskip("mypy", reason="the test extra installs mypy")
    proc = _run("mypy", "--no-incremental")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "no issues found" in proc.stdout
