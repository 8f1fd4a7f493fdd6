"""Every python block of docs/CHAT.md runs (each in a fresh process) and prints what the doc says it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "CHAT.md"
KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "XAI_API_KEY", "OPENROUTER_API_KEY")


def blocks() -> list[tuple[str, str, str | None]]:
    """(file name, code, the ``` block right after its "prints", if any)."""
    text = DOC.read_text()
    out = []
    for m in re.finditer(r"```python\n(.*?)```\n\nprints(?: `([^`]*)`|\n\n```\n(.*?)```)?", text, re.S):
        code = m.group(1)
        first = code.splitlines()[0]
        assert first.startswith("# ") and first.endswith(".py"), f"each block starts with '# name.py': {first!r}"
        out.append((first[2:].strip(), code, m.group(3) if m.group(3) is not None else m.group(2)))
    return out


def test_every_python_block_says_what_it_prints() -> None:
    found = blocks()
    assert len(found) == len(re.findall(r"```python\n", DOC.read_text())) == 5
    assert all(expected for _, _, expected in found)


@pytest.mark.slow
@pytest.mark.parametrize("name", [b[0] for b in blocks()])
def test_chat_doc_example_runs(tmp_path: Path, name: str) -> None:
    _, code, expected = next(b for b in blocks() if b[0] == name)
    (tmp_path / name).write_text(code)
    env = {k: v for k, v in os.environ.items() if k not in KEYS}
    proc = subprocess.run([sys.executable, name], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    if "\n" in (expected or "").strip():
        assert proc.stdout.strip() == expected.strip()
    else:
        assert proc.stdout.strip().split("(")[0].strip() == expected.split("(")[0].strip()


def test_the_conversation_table_format_is_written_once_and_names_the_file_the_code_opens() -> None:
    import openfunctions.chat._conversations as module
    from openfunctions.chat._conversations import log_path

    doc = module.__doc__ or ""
    hashed = log_path(Path("/d"), "../x y").name
    prefix = hashed[: hashed.index("-") + 1]  # what an unsafe name becomes, before its hex digits
    assert prefix == "sha256-" and f"``{prefix}``" in doc
    page = (Path(__file__).parents[2] / "docs" / "formats" / "chat-conversations.md").read_text()
    assert "chat/_conversations.py" in page
    for record in ("issued", "reset", "used", "evicted", "snapshot"):  # the records are described in the module only
        assert f"- ``{record}``:" in doc and f"| `{record}` |" not in page
