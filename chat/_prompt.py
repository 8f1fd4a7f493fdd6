"""Prompt resolution: a preset name, inline text, a markdown file, or structured options.

``resolve_prompt(spec)`` returns the role text the chat agent's system prompt
starts with (``providers.compose_prompt`` then adds ``## Context`` and
``## Tools``):

- ``None``: the ``assistant`` preset;
- a name in :data:`PRESETS`: that preset;
- a path ending in ``.md``/``.markdown``/``.txt``, or naming an existing
  file: the file's text (UTF-8; a missing or empty file is an error naming it);
- any other text with a space or a newline in it: the text itself;
- a single word that is no preset: an error listing the presets (a typo
  must not silently become the whole prompt);
- a mapping: ``{"preset"?, "role"?, "instructions"?: str | [str],
  "tone"?, "language"?}``: the preset (or role) followed by the
  instructions as a bullet list, then tone and language lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._errors import ChatConfigError

_MEMORY_HINT = (
    "When the user tells you something worth keeping (a preference, a name, a decision), save it with "
    "memory_save_fact; when an answer may depend on something said in an earlier conversation, look with memory_search."
)

PRESETS: dict[str, str] = {
    "assistant": "You are a helpful assistant. Answer clearly and briefly. Use your tools when they help, and say "
                 "what you did with them. If you do not know, say so.",
    "concise": "You are a terse assistant. Answer in as few words as possible; use tools when they help.",
    "researcher": "You are a careful researcher. Before answering, gather what your tools can tell you; cite which "
                  "tool results your answer rests on; separate what you found from what you infer.",
    "operator": "You are an operations assistant. Prefer read-only tools; before any tool that changes something, "
                "say what it will change. Report every tool result's outcome exactly.",
}
PROMPT_FILE_MAX_BYTES = 64 * 1024
_FILE_SUFFIXES = (".md", ".markdown", ".txt")
_KEYS = ("preset", "role", "instructions", "tone", "language")


def _preset(name: str) -> str:
    if name not in PRESETS:
        raise ChatConfigError(f"unknown prompt preset {name!r}: choose one of {', '.join(PRESETS)}, or give inline "
                              "text (with spaces), a .md file, or structured options",
                              details={"presets": list(PRESETS)})
    return PRESETS[name]


def _file(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ChatConfigError(f"prompt file {str(path)!r}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > PROMPT_FILE_MAX_BYTES:
        raise ChatConfigError(f"prompt file {str(path)!r} is {len(data)} bytes; the limit is {PROMPT_FILE_MAX_BYTES}")
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise ChatConfigError(f"prompt file {str(path)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    if not text:
        raise ChatConfigError(f"prompt file {str(path)!r} is empty")
    return text


def _structured(spec: Mapping[str, Any]) -> str:
    unknown = sorted(set(spec) - set(_KEYS))
    if unknown:
        raise ChatConfigError(f"prompt options: unknown key(s) {unknown}; use {', '.join(_KEYS)}")
    for key in ("preset", "role", "tone", "language"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            raise ChatConfigError(f"prompt options: {key} must be a string, got {type(spec[key]).__name__}")
    if spec.get("preset") and spec.get("role"):
        raise ChatConfigError("prompt options: give preset or role, not both")
    parts = [spec["role"].strip() if spec.get("role") else _preset(spec.get("preset") or "assistant")]
    instructions = spec.get("instructions")
    if isinstance(instructions, str):
        instructions = [instructions]
    if instructions is not None:
        if not isinstance(instructions, (list, tuple)) or not all(isinstance(i, str) and i.strip() for i in instructions):
            raise ChatConfigError("prompt options: instructions must be a non-empty string or a list of them")
        parts.append("\n".join(f"- {i.strip()}" for i in instructions))
    if spec.get("tone"):
        parts.append(f"Tone: {spec['tone'].strip()}.")
    if spec.get("language"):
        parts.append(f"Answer in {spec['language'].strip()}.")
    return "\n\n".join(parts)


def resolve_prompt(spec: Any) -> str:
    """The role text for ``spec`` (see the module docstring)."""
    if spec is None:
        return PRESETS["assistant"]
    if isinstance(spec, Path):
        return _file(spec)
    if isinstance(spec, Mapping):
        return _structured(spec)
    if not isinstance(spec, str):
        raise ChatConfigError(f"prompt must be a preset name, text, a file path or a mapping, got {type(spec).__name__}")
    text = spec.strip()
    if not text:
        raise ChatConfigError("prompt is empty: give a preset name, text, a .md file, or leave it out")
    if text in PRESETS:
        return PRESETS[text]
    if "\n" not in text and (text.lower().endswith(_FILE_SUFFIXES) or Path(text).is_file()):
        return _file(Path(text).expanduser())
    if not any(c.isspace() for c in text):
        return _preset(text)
    return text


def memory_hint() -> str:
    return _MEMORY_HINT


__all__ = ["PRESETS", "memory_hint", "resolve_prompt"]
