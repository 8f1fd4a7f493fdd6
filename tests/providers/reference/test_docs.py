"""docs/EXTENDING.md's examples run and print what the page shows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "EXTENDING.md"


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(), re.S)


def test_python_provider_example_prints_what_the_doc_shows():
    example = next(b for b in blocks("python") if "anyio.run(main)" in b)
    shown = next(b for b in blocks("text") if b.startswith("['vault_backlinks'"))
    p = subprocess.run([sys.executable, "-c", example], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout == shown


def test_tool_tests_example_prints_what_the_doc_shows(tmp_path):
    module = next(b for b in blocks("python") if "@tool(tests=" in b)
    shown = next(b for b in blocks("text") if b.startswith("$ openfunctions-mcp test"))
    command, *expected = shown.splitlines()
    (tmp_path / "mytools.py").write_text(module)
    p = subprocess.run([sys.executable, "-m", "openfunctions.servers", *command.split()[2:]], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.sub(r"rcpt_[0-9a-f]{32}", "rcpt_…", p.stdout).splitlines() == expected


def test_skill_example_parses():
    from openfunctions.skills import parse_skill

    skill = parse_skill(blocks("markdown")[0], source="doc")
    assert (skill.name, skill.tags) == ("release-notes", ("writing", "release"))


def test_pyproject_example_names_the_four_groups():
    from openfunctions.plugins import GROUPS

    toml = blocks("toml")[0]
    assert re.findall(r'entry-points\."([^"]+)"', toml) == list(GROUPS.values())
