"""Every ```python example in docs/WORKFLOWS.md runs as written (each in a fresh namespace)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "WORKFLOWS.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), re.S | re.M)


def test_the_doc_has_examples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_example_runs(index, tmp_path, monkeypatch, request):
    monkeypatch.chdir(tmp_path)
    if "OPENFUNCTIONS_DATABASE_URL" in BLOCKS[index]:  # the PostgreSQL example: a real database (tests/_pg.py)
        monkeypatch.setenv("OPENFUNCTIONS_DATABASE_URL", request.getfixturevalue("pg_dsn"))
    code = compile(BLOCKS[index], f"{DOC.name}[python block {index}]", "exec")
    exec(code, {"__name__": "__main__"})  # the examples assert their own results
