"""Skills: frontmatter parsing, loading from directories (bad files reported, skipped), tools, prompts, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from openfunctions.core import ToolRegistry
from openfunctions.skills import (
    FrontmatterError,
    load_skills,
    parse_skill,
    skill_tools,
    skills_prompt,
    split_frontmatter,
)

GOOD = """\
---
name: release-notes
description: "Write release notes: from the changelog"
tags: [writing, release]
owner: docs
---
1. Read CHANGELOG.md.
2. Group the lines by theme.
"""


def make_skills(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "release.md").write_text(GOOD)
    (root / "sub").mkdir()
    (root / "sub" / "triage.md").write_text("---\ndescription: Triage a bug report\ntags:\n  - bugs\n---\nAsk for steps.\n")
    (root / "unclosed.md").write_text("---\nname: x\ndescription: y\nNo closing line.\n")
    (root / "nodesc.md").write_text("---\nname: quiet\n---\nBody.\n")
    (root / "nested.md").write_text("---\nname: n\ndescription: d\nmeta:\n  key: value\n---\nBody\n")
    (root / "zz-dupe.md").write_text("---\nname: release-notes\ndescription: again\n---\nBody\n")
    (root / "README.md").write_text("# not a skill\n")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "x.md").write_text(GOOD.replace("release-notes", "hidden"))
    return root


def test_frontmatter_values():
    fm, body = split_frontmatter("---\na: 'it''s'\nb: [x, \"y, z\"]\nc: true\nd: 12\ne:\n  - one\n  - 2\nf:\n---\nbody\n")
    assert fm == {"a": "it's", "b": ["x", "y, z"], "c": True, "d": 12, "e": ["one", 2], "f": None}
    assert body == "body\n"
    assert split_frontmatter("no frontmatter\n") == ({}, "no frontmatter\n")
    for bad, where in [("---\nx: 1\n", "not closed"), ("---\n- a\n---\n", "line 2"), ("---\nx: {a: 1}\n---\n", "line 2"),
                       ("---\nx: 1\nx: 2\n---\n", "appears twice"), ("---\nx: [a\n---\n", "same line")]:
        with pytest.raises(FrontmatterError, match=where):
            split_frontmatter(bad, source="t.md")


def test_parse_skill():
    s = parse_skill(GOOD, source="release.md")
    assert (s.name, s.description, s.tags, s.meta) == (
        "release-notes", "Write release notes: from the changelog", ("writing", "release"), {"owner": "docs"})
    assert s.body.startswith("1. Read CHANGELOG.md.")


def test_load_dir_reports_and_skips_bad_files(tmp_path):
    skills = load_skills([make_skills(tmp_path / "skills"), tmp_path / "missing"], entry_points=False)
    assert [s.name for s in skills] == ["release-notes", "triage"]  # name defaults to the file name
    problems = {Path(p.source).name: p.code for p in skills.problems}
    assert problems == {"zz-dupe.md": "skill_duplicate", "nested.md": "frontmatter_invalid",
                        "nodesc.md": "skill_description_missing", "unclosed.md": "frontmatter_invalid",
                        "missing": "skill_dir_missing"}


@pytest.mark.anyio
async def test_skill_tools_load_on_demand(tmp_path):
    skills = load_skills([make_skills(tmp_path / "skills")], entry_points=False)
    registry = ToolRegistry(skill_tools(skills))
    listed = await registry.execute("skill_list", {"tag": "bugs"})
    assert listed == {"count": 1, "skills": [{"name": "triage", "description": "Triage a bug report", "tags": ["bugs"]}]}
    loaded = await registry.execute("skill_load", {"name": "release-notes"})
    assert loaded["instructions"].startswith("1. Read CHANGELOG.md.")
    missing = await registry.execute_detailed("skill_load", {"name": "nope"})
    assert missing.error.code == "skill_not_found" and missing.receipt.outcome == "rejected"
    assert skills_prompt(skills).splitlines() == [
        "Skills (load one with skill_load before a task it fits):",
        "- release-notes: Write release notes: from the changelog", "- triage: Triage a bug report"]


def test_cli_list_and_show(tmp_path):
    root = make_skills(tmp_path / "skills")
    cmd = [sys.executable, "-m", "openfunctions.servers", "skills"]
    out = subprocess.run([*cmd, "list", "--skills", str(root), "--no-plugins"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0] == "release-notes [writing, release]: Write release notes: from the changelog"
    assert "skipped:" in out.stderr and "nodesc.md: the frontmatter has no 'description'" in out.stderr
    strict = subprocess.run([*cmd, "list", "--skills", str(root), "--no-plugins", "--strict", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert strict.returncode == 1 and len(json.loads(strict.stdout)["problems"]) == 4
    show = subprocess.run([*cmd, "show", "triage", "--skills", str(root), "--no-plugins"], capture_output=True,
                          text=True, timeout=60)
    assert show.returncode == 0 and show.stdout == "Ask for steps.\n"
    unknown = subprocess.run([*cmd, "show", "nope", "--skills", str(root), "--no-plugins"], capture_output=True,
                             text=True, timeout=60)
    assert unknown.returncode == 1 and "no skill named 'nope'" in unknown.stderr


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")
