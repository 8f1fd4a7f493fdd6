"""docs/STATE.md's Python example runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "STATE.md"


def test_state_md_python_example_runs(tmp_path):
    block = re.search(r"```python\n(.*?)```", DOC.read_text(), re.S).group(1)
    out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "['user/2']"
    assert "Ada prefers tea" in lines[1]
    assert lines[2].startswith("Deploy keys rotate monthly.")
