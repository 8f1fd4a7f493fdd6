"""The package's names are typed for mypy, the lazily loaded HTTP adapters included.

``openfunctions.adapters`` loads its HTTP adapters on first use through a module ``__getattr__``. mypy reads a
module ``__getattr__`` as "every name exists, typed by its return": ``from openfunctions.adapters import Anything``
would pass the strict check as ``Any``. The package shows mypy the real imports instead; this checks a probe module
against the installed layout (as tests/test_static_checks.py does).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_static_checks import REPO, build_installed_tree

pytestmark = pytest.mark.slow

PROBE = """\
from openfunctions.adapters import GeminiAdapter, NoSuchAdapter

reveal_type(GeminiAdapter)
"""


def test_mypy_refuses_a_name_the_package_does_not_have_and_types_the_lazy_ones(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="the test extra installs mypy")
    tree = build_installed_tree(tmp_path)
    (tree / "probe.py").write_text(PROBE)
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"), "--no-incremental",
         "--cache-dir", "/dev/null", "probe.py"],
        cwd=tree, capture_output=True, text=True, timeout=600,
    )
    out = proc.stdout
    assert 'Module "openfunctions.adapters" has no attribute "NoSuchAdapter"' in out, out + proc.stderr
    assert 'Revealed type is "def' in out and "GeminiAdapter" in out.split("Revealed type is", 1)[1], out
