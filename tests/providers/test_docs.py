"""The runnable example in docs/GATEWAY.md runs and prints what it says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "GATEWAY.md"


def test_the_context_provider_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    example = next(b for b in blocks if "anyio.run(main)" in b)
    p = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "('context', 'context:tasks')"
    assert lines[1] == "['write the report', 'review the gateway']"
    assert "## Context\n\nOpen tasks: 2" in p.stdout
    assert "### tasks\n- tasks_list (read-only): List my open tasks." in p.stdout
    assert lines[-1] == "['up']"
