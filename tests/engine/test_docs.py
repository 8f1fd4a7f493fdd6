"""Every python block of docs/ENGINE.md runs, in order, in one directory, and prints what the page says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ._proc import engine_env

DOC = Path(__file__).resolve().parents[2] / "docs" / "ENGINE.md"


def blocks() -> list[tuple[str, str, str | None]]:
    """(file name, code, the output the page shows after it or None)."""
    text = DOC.read_text()
    out = []
    for m in re.finditer(r"```python\n(.*?)```(?:\n\nprints\n\n```text\n(.*?)```)?", text, re.S):
        code, printed = m.group(1), m.group(2)
        first = code.splitlines()[0]
        assert first.startswith("# ") and first.endswith(".py"), f"each block starts with '# name.py': {first!r}"
        out.append((first[2:].strip(), code, printed))
    return out


def test_the_page_shows_what_each_script_prints() -> None:
    names = [(n, p is not None) for n, _, p in blocks()]
    assert names == [("mytools.py", False), ("run_task.py", True), ("crash_resume.py", True), ("session.py", True),
                     ("review.py", True), ("embed.py", True)]


@pytest.mark.slow
def test_engine_doc_examples_run(tmp_path: Path) -> None:
    env = engine_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    for name, code, printed in blocks():
        (tmp_path / name).write_text(code)
        if printed is None:
            continue  # a module the others import
        proc = subprocess.run([sys.executable, name], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
        assert proc.stdout == printed, f"{name} printed:\n{proc.stdout}"
