"""Markdown frontmatter: the ``---`` block at the top of a skill file or a vault note.

Format (the subset of YAML that skill files and Obsidian notes use)::

    ---
    name: release-notes
    description: "Write release notes from a changelog"
    tags: [writing, release]
    people:
      - Ada Lovelace
      - Alan Turing
    draft: false
    ---
    The markdown body starts here.

Each line is ``key: value`` or, under a key with no value, a ``- item`` list
entry. A value is a quoted string (``"..."`` or ``'...'``), a flow list
(``[a, b]``), ``true``/``false``, an integer, or a plain string. Comment lines
(``#``) and blank lines are skipped. Nested mappings, multi-line strings and
anchors are not supported: they are reported as :class:`FrontmatterError`
naming the line, never guessed at. Text without a leading ``---`` line has no
frontmatter.
"""

from __future__ import annotations

import re
from typing import Any

from openfunctions.core import OpenFunctionsError

_KEY_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_\-]*)\s*:(?:\s+(.*)|\s*)$")
_INT_RE = re.compile(r"^-?[0-9]{1,18}$")
MAX_FRONTMATTER_LINES = 500


class FrontmatterError(OpenFunctionsError):
    """A frontmatter block that does not parse; the message names the line."""

    code = "frontmatter_invalid"


def _scalar(text: str, where: str) -> Any:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        inner = text[1:-1]
        return inner.replace('\\"', '"').replace("\\\\", "\\") if text[0] == '"' else inner.replace("''", "'")
    if text[:1] in ("\"", "'"):
        raise FrontmatterError(f"{where}: unterminated quoted string {text!r}")
    if text in ("true", "True"):
        return True
    if text in ("false", "False"):
        return False
    if text in ("null", "~", ""):
        return None
    if _INT_RE.match(text):
        return int(text)
    if text[:1] in "{&*|>":
        raise FrontmatterError(f"{where}: {text[:1]!r} values (mappings, anchors, block strings) are not supported")
    return text


def _flow_list(text: str, where: str) -> list[Any]:
    inner = text.strip()[1:-1].strip()
    if not inner:
        return []
    parts, current, quote = [], "", ""
    for ch in inner:  # split on commas outside quotes: [a, "b, c"] is two items
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'" and not current.strip():
            quote = ch
        elif ch == ",":
            parts.append(current)
            current = ""
            continue
        current += ch
    parts.append(current)
    return [_scalar(part, where) for part in parts]


def _value(text: str, where: str) -> Any:
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        return _flow_list(text, where)
    if text.startswith("["):
        raise FrontmatterError(f"{where}: a list opened with '[' must close on the same line")
    return _scalar(text, where)


def split_frontmatter(text: str, *, source: str = "<text>") -> tuple[dict[str, Any], str]:
    """``(frontmatter, body)`` of a markdown text; ``({}, text)`` when it has none.

    Raises :class:`FrontmatterError` (naming ``source`` and the line) when the
    block is not closed or a line does not parse.
    """
    text = text.lstrip("\ufeff")
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].rstrip("\r\n").rstrip() != "---":
        return {}, text
    end = None
    for i, line in enumerate(lines[1 : MAX_FRONTMATTER_LINES + 2], start=1):
        if line.rstrip("\r\n").rstrip() in ("---", "..."):
            end = i
            break
    if end is None:
        raise FrontmatterError(f"{source}: the frontmatter opened by '---' on line 1 is not closed by a '---' line "
                               f"(within {MAX_FRONTMATTER_LINES} lines)")
    data: dict[str, Any] = {}
    list_key: str | None = None
    for n, raw in enumerate(lines[1:end], start=2):
        line = raw.rstrip("\r\n")
        where = f"{source}: frontmatter line {n}"
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("- ") or stripped == "-":
            if list_key is None:
                raise FrontmatterError(f"{where}: a '- item' line must follow a 'key:' line with no value")
            if not isinstance(data[list_key], list):
                data[list_key] = []
            data[list_key].append(_value(stripped[1:], where))
            continue
        if line[:1].isspace():
            raise FrontmatterError(f"{where}: nested mappings are not supported ({stripped!r})")
        m = _KEY_RE.match(line)
        if not m:
            raise FrontmatterError(f"{where}: expected 'key: value', got {stripped!r}")
        key, value = m.group(1), m.group(2)
        if key in data:
            raise FrontmatterError(f"{where}: key {key!r} appears twice")
        if value is None or not value.strip():
            data[key] = None
            list_key = key
        else:
            data[key] = _value(value, where)
            list_key = None
    return data, "".join(lines[end + 1 :])


__all__ = ["FrontmatterError", "split_frontmatter"]
