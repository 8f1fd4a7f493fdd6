"""Directory ingest stays inside the directory: symbolic links are not followed unless asked."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from openfunctions.rag import collect_files
from tests.interop._serve import cli_command

SECRET = "aws_secret_access_key = AKIAEXAMPLESECRETVALUE"


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    outside = tmp_path / "outside"
    (outside / "nested").mkdir(parents=True)
    (outside / "credentials.txt").write_text(SECRET + "\n")
    (outside / "nested" / "more.md").write_text("outside the directory, reached through a linked directory\n")
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "real.md").write_text("The handbook says keys rotate monthly.\n")
    os.symlink(outside / "credentials.txt", docs / "notes.txt")   # a file link pointing out
    os.symlink(outside / "nested", docs / "linked")                # a directory link pointing out
    os.symlink(docs, docs / "loop")                                # a cycle (only matters when following)
    return docs, outside


def test_directory_walk_skips_links_by_default_and_names_them(tmp_path):
    docs, _ = _tree(tmp_path)
    got = collect_files([docs])
    assert got.files == [docs / "real.md"]
    assert sorted(p.name for p in got.skipped_links) == ["linked", "loop", "notes.txt"]


def test_follow_links_reads_through_them_and_ends_a_cycle(tmp_path):
    docs, outside = _tree(tmp_path)
    got = collect_files([docs], follow_links=True)
    resolved = sorted({p.resolve() for p in got.files})
    assert resolved == sorted([(docs / "real.md").resolve(), (outside / "credentials.txt").resolve(),
                               (outside / "nested" / "more.md").resolve()])
    assert got.skipped_links == []


def test_a_link_named_explicitly_is_read(tmp_path):
    docs, outside = _tree(tmp_path)
    assert collect_files([docs / "notes.txt"]).files == [docs / "notes.txt"]


@pytest.mark.slow
def test_cli_ingest_does_not_index_a_linked_credentials_file(tmp_path):
    docs, _ = _tree(tmp_path)
    data = tmp_path / "data"

    def rag(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*cli_command(), "rag", *args, "--data-dir", str(data)], capture_output=True,
                              text=True, cwd=tmp_path, timeout=120)

    ing = rag("ingest", str(docs), "--json")
    assert ing.returncode == 0, ing.stderr
    assert [json.loads(line)["path"] for line in ing.stdout.splitlines()] == [str(docs / "real.md")]
    assert "skipped symbolic link" in ing.stderr and "notes.txt" in ing.stderr
    hits = json.loads(rag("search", "aws secret access key", "--json").stdout)["results"]
    assert all("AKIA" not in h["text"] for h in hits)
    followed = rag("ingest", str(docs), "--follow-links", "--json")
    assert followed.returncode == 0, followed.stderr
    hits = json.loads(rag("search", "aws secret access key", "--json").stdout)["results"]
    assert any("AKIA" in h["text"] for h in hits)
