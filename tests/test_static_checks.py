"""Static checks, run inside the test suite (so the README's test command and .ci/run include them).

* ruff with the rules of ``[tool.ruff.lint]`` (pyflakes, bugbear, import order,
  pyupgrade). The whole tree must pass every rule except the few listed in
  ``NOT_YET``, which still have findings in modules other sessions are rewriting;
  the files in ``FULL_RULES`` pass every rule. The remaining findings are counted
  and reported as a warning, so the count is visible in every run until it is 0.
  Shrink ``NOT_YET`` as modules get clean.
* mypy, strict on ``core/`` (``[tool.mypy]``; a few modules have error codes
  relaxed in ``[[tool.mypy.overrides]]`` until they are clean).
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

# Rules with findings outside FULL_RULES on the day the checks were added (145 findings).
NOT_YET = ("UP037", "B023", "I001", "B905", "UP017", "F401", "UP035", "B904", "B017", "UP045", "UP031", "F541",
           "B009", "B007", "B006", "B004")
FULL_RULES = (
    "servers/cli.py", "servers/demo.py", "servers/__main__.py", "servers/__init__.py", "core/tool.py",
    "core/schema.py", "core/registry.py", "core/_logging.py", "core/journal/cli.py", "artifacts/tool.py",
    "artifacts/projection.py", "tests/servers/test_cli.py", "tests/servers/test_packaging.py",
    "tests/servers/test_release.py", "tests/servers/test_strict_schemas.py", "tests/core/test_tool.py",
    "tests/interop/test_provision_messages.py", "tests/test_static_checks.py",
    # core and artifacts whole (issue 17's house items), but for the four modules helper perf rewrites this
    # session: they join when they are clean (FULL_RULES_NOT_YET).
    "core", "artifacts", "tests/core", "tests/artifacts", "servers/errors.py", "servers/_constants.py",
)
FULL_RULES_NOT_YET = ("core/executor.py", "core/scheduler.py", "core/schema.py", "core/journal/_writer.py",
                      "tests/core/test_executor*.py")


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=600)


def _ruff(*args: str) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("ruff", reason="the test extra installs ruff")
    return _run("ruff", "check", "--no-cache", "--output-format", "concise", *args)


def test_ruff_passes_on_the_whole_tree_except_the_rules_not_yet_clean():
    proc = _ruff("--extend-ignore", ",".join(NOT_YET), ".")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ruff_passes_every_rule_on_the_files_kept_clean():
    proc = _ruff("--force-exclude", "--extend-exclude", ",".join(FULL_RULES_NOT_YET), *FULL_RULES)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ruff_findings_left_are_counted():
    proc = _ruff("--exit-zero", ".")
    codes = Counter(line.split(": ", 1)[1].split(" ", 1)[0] for line in proc.stdout.splitlines()
                    if line.count(":") >= 3 and ": " in line)
    assert set(codes) <= set(NOT_YET), f"a rule outside NOT_YET has findings: {codes}"
    if codes:
        warnings.warn(f"ruff: {sum(codes.values())} findings left in rules not yet enforced tree-wide: "
                      + ", ".join(f"{c} {n}" for c, n in codes.most_common()), stacklevel=1)


def test_mypy_strict_on_core():
    pytest.importorskip("mypy", reason="the test extra installs mypy")
    proc = _run("mypy", "--no-incremental")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "no issues found" in proc.stdout
