"""of_list_dir with hostile paths: a clear, short error; failed/known, never unknown."""

from __future__ import annotations

import os

import pytest

from openfunctions.core import ToolRegistry
from openfunctions.servers._example_tools import example_tools


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root-dir-name"
    (r / "sub").mkdir(parents=True)
    (r / "a.txt").write_text("abc")
    return r


@pytest.mark.anyio
@pytest.mark.parametrize(
    "path",
    [
        "x" * 100_000,  # ENAMETOOLONG
        "sub/" + "y" * 300,  # one component past NAME_MAX
        "a\x00b",  # ValueError: embedded null byte
        "sub/\x00",
        "\udcff",  # a lone surrogate: not encodable as a file name
    ],
)
async def test_hostile_paths_fail_known_with_a_short_message(root, path):
    registry = ToolRegistry(example_tools(files_root=root))
    out = await registry.execute_detailed("of_list_dir", {"path": path})
    assert out.result.is_error
    assert out.receipt.outcome in ("failed", "rejected") and out.receipt.certainty == "known"
    text = out.result.content[0]["text"]
    assert len(text) < 400, text[:500]
    assert str(root) not in text  # the absolute root is the operator's business
    for name in ("OSError", "ValueError", "UnicodeEncodeError", "FileNotFoundError", "Traceback"):
        assert name not in text


@pytest.mark.anyio
@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
async def test_an_unreadable_directory_fails_known(root):
    (root / "locked").mkdir(mode=0)
    registry = ToolRegistry(example_tools(files_root=root))
    out = await registry.execute_detailed("of_list_dir", {"path": "locked"})
    assert out.result.is_error and out.receipt.certainty == "known"
    assert "permission" in out.result.content[0]["text"].lower()


@pytest.mark.anyio
async def test_a_directory_removed_under_the_listing_fails_known(root, monkeypatch):
    registry = ToolRegistry(example_tools(files_root=root))
    real_scandir = os.scandir

    def vanished(path):
        raise FileNotFoundError(2, "No such file or directory", str(path))

    monkeypatch.setattr(os, "scandir", vanished)
    out = await registry.execute_detailed("of_list_dir", {"path": "sub"})
    monkeypatch.setattr(os, "scandir", real_scandir)
    assert out.result.is_error and out.receipt.certainty == "known"
    assert str(root) not in out.result.content[0]["text"]
    ok = await registry.execute("of_list_dir", {"path": "sub"})
    assert ok["path"] == "sub"
