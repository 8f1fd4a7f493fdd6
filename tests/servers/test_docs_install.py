"""Every page that shows a bare ``uvx openfunctions-mcp`` (which needs the package on PyPI) says what works before that."""

from __future__ import annotations

import json
import re

from .conftest import REPO

SECTION = "Run it before it is published"
ANCHOR = "README.md#run-it-before-it-is-published"
_BARE_COMMAND = re.compile(r"(?<![\w/.-])uvx openfunctions-mcp\b")
_BARE_ENTRY = re.compile(r'"command":\s*"uvx",\s*"args":\s*\[\s*"openfunctions-mcp"')


def _pages() -> list:
    return [p for p in sorted((REPO / "docs").glob("*.md"))] + [REPO / "README.md"]


def test_every_page_with_a_bare_uvx_links_the_way_that_works_now():
    shown = []
    for page in _pages():
        text = page.read_text()
        if _BARE_COMMAND.search(text) or _BARE_ENTRY.search(re.sub(r"\s+", " ", text)):
            shown.append(page.name)
            if page.name == "README.md":
                assert f"## {SECTION}" in text
            else:
                assert ANCHOR in text, f"{page.name} shows a bare `uvx openfunctions-mcp` but not {ANCHOR}"
    assert {"SERVERS.md", "STATE.md", "GATEWAY.md", "WORK.md"} <= set(shown)  # the check sees the pages it guards


def test_the_readme_section_says_what_works_now_and_what_works_once_published():
    text = (REPO / "README.md").read_text()
    section = text.split(f"## {SECTION}", 1)[1].split("\n## ", 1)[0]
    assert "uvx --from /path/to/openfunctions-mcp openfunctions-mcp" in section  # now
    assert "uvx openfunctions-mcp" in section and ".github/workflows/release.yml" in section  # then, and how
    entry = re.search(r"```json\n(.*?)```", section, re.S)
    assert entry and json.loads(entry.group(1))["mcpServers"]
