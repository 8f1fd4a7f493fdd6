"""The first test run's downloads say what they fetch and where they are kept."""

from __future__ import annotations

import pytest

from .conftest import _npm_install


def test_a_fetch_is_announced_with_the_cache_folder(tmp_path):
    said: list[str] = []
    folder = tmp_path / ".interop" / "peers"
    with pytest.raises(RuntimeError, match="`npm` is not on PATH"):
        _npm_install(None, folder, ["@modelcontextprotocol/inspector@2.12.0"], {}, say=said.append)
    assert said == [f"fetching @modelcontextprotocol/inspector@2.12.0 from the npm registry into {folder} "
                    f"(once: later runs reuse it; the whole of {folder.parent} is about 480 MB)"]


def test_a_complete_folder_is_not_fetched_again(tmp_path):
    said: list[str] = []
    folder = tmp_path / "peers"
    folder.mkdir()
    (folder / ".complete").write_text("pkg@1")
    _npm_install(None, folder, ["pkg@1"], {}, say=said.append)
    assert said == []
