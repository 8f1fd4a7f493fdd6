"""docs/formats/engine.md's examples, run: each ``>`` line goes to a real engine process, and the ``<`` lines
after it are the events it must answer, in order (random ids compared as ``prefix_…``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ._proc import Engine

DOC = Path(__file__).resolve().parents[2] / "docs" / "formats" / "engine.md"
_IDS = re.compile(r'"(ses|rcpt|steer)_[0-9a-f]{32}"')


def _examples() -> list[tuple[str, list[str], list[str]]]:
    """(title, replies lines, session lines) per session block, with the replies block before it."""
    text = DOC.read_text()
    out = []
    replies: list[str] = []
    title = ""
    for m in re.finditer(r"^### ([^\n]+)$|^```(\w+)(?: (\w+))?\n(.*?)^```", text, re.M | re.S):
        if m.group(1):
            title = m.group(1)
        elif m.group(3) == "replies":
            replies = m.group(4).splitlines()
        elif m.group(3) == "session":
            out.append((title, replies, m.group(4).splitlines()))
    return out


def _normal(event: dict) -> dict:
    return json.loads(_IDS.sub(lambda m: f'"{m.group(1)}_…"', json.dumps(event, ensure_ascii=False)))


def test_the_doc_has_the_examples_this_test_runs() -> None:
    titles = [t for t, _, _ in _examples()]
    assert titles == ["A turn: a tool call, then `finish`", "Goal, steering and status", "Compaction", "Bad lines"]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(4))
def test_protocol_example_runs(tmp_path: Path, index: int) -> None:
    title, replies, lines = _examples()[index]
    tools = re.search(r"```python\n# doctools.py\n(.*?)```", DOC.read_text(), re.S)
    assert tools is not None
    (tmp_path / "doctools.py").write_text(tools.group(1))
    (tmp_path / "replies.jsonl").write_text("\n".join(replies) + "\n")
    eng = Engine(tmp_path, "--model", "scripted:replies.jsonl", "--module", "doctools", "--data-dir", "data")
    try:
        for line in lines:
            kind, body = line[:2], line[2:]
            if kind == "> ":
                if body == "EOF":
                    eng.close_stdin()
                else:
                    eng.send(body.encode() + b"\n")
            elif kind == "< ":
                assert _normal(eng.next()) == json.loads(body), f"{title}: expected {body}"
            else:
                raise AssertionError(f"{title}: a session line starts with '> ' or '< ': {line!r}")
    finally:
        if eng.proc.poll() is None:
            eng.kill()
