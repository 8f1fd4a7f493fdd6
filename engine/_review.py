"""``engine review``: a run over a diff or files whose result is a verdict, validated against :data:`VERDICT_SCHEMA`.

The task shows the model the diff (or each file, under its path) and asks for the verdict through the
``finish`` tool (its ``result`` is checked against the schema; an invalid one is refused back to the model,
which may correct it) or as a JSON text answer (checked the same way; text that is not a valid verdict
ends the turn ``failed`` with ``engine_verdict_invalid`` and what was wrong).

What the model reads is bounded: each file to :data:`FILE_MAX_BYTES`, the whole to :data:`TOTAL_MAX_BYTES`
(a file cut short says so); a file that is not UTF-8 is shown with replacement characters.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._errors import EngineConfigError

FILE_MAX_BYTES = 256 * 1024
TOTAL_MAX_BYTES = 1024 * 1024

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"enum": ["approve", "request_changes", "comment"]},
        "summary": {"type": "string", "maxLength": 8000},
        "findings": {
            "type": "array", "maxItems": 200,
            "items": {
                "type": "object",
                "properties": {
                    "file": {"type": "string"},
                    "line": {"type": "integer", "minimum": 1},
                    "severity": {"enum": ["info", "warning", "error"]},
                    "message": {"type": "string", "maxLength": 4000},
                },
                "required": ["file", "severity", "message"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["verdict", "summary", "findings"],
    "additionalProperties": False,
}


def _read(path: Path, budget: int) -> tuple[str, int]:
    try:
        with path.open("rb") as f:
            data = f.read(min(FILE_MAX_BYTES, budget) + 1)
    except OSError as exc:
        raise EngineConfigError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    cut = len(data) > min(FILE_MAX_BYTES, budget)
    data = data[: min(FILE_MAX_BYTES, budget)]
    text = data.decode("utf-8", errors="replace")
    if cut:
        text += "\n[... cut: the rest of the file is over the review's size limit]"
    return text, len(data)


def review_task(*, files: Sequence[str | Path] = (), diff: str | Path | None = None) -> str:
    """The review's prompt: the material and the verdict's shape."""
    if bool(files) == (diff is not None):
        raise EngineConfigError("review takes --diff FILE or --files FILE..., one of them")
    budget = TOTAL_MAX_BYTES
    parts: list[str] = []
    if diff is not None:
        text, _ = _read(Path(diff), budget)
        parts.append(f"The diff to review:\n\n```diff\n{text}\n```")
    else:
        for f in files:
            if budget <= 0:
                parts.append(f"[{f}: not shown, the review's size limit is reached]")
                continue
            text, used = _read(Path(f), budget)
            budget -= used
            parts.append(f"File {f}:\n\n```\n{text}\n```")
    return ("Review the following. Report a verdict (approve, request_changes or comment), a summary, and "
            "findings (file, line, severity info|warning|error, message). Call `finish` with the verdict as "
            "`result`, an object of this JSON Schema:\n"
            + json.dumps(VERDICT_SCHEMA, separators=(",", ":")) + "\n\n" + "\n\n".join(parts))


__all__ = ["FILE_MAX_BYTES", "TOTAL_MAX_BYTES", "VERDICT_SCHEMA", "review_task"]
