"""Example tools the ``tools`` profile serves by default: small, real, read-only.

- ``of_hash_text``: digest of a text (sha256, sha512, blake2b, sha1/md5 for legacy checksums).
- ``of_json_query``: pick a value out of a JSON document (JSON text) by a path like ``a.b[0].c``.
- ``of_now``: the current time in UTC (and optionally in a named IANA zone).
- ``of_list_dir``: list a directory under a configured root (only registered when
  a root is configured: ``--files-root``); paths can never leave the root.

All are reads with no side effects (``effect="read"``, parallel-safe,
idempotent), except ``of_now`` which is not idempotent (time moves).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from openfunctions.core import ToolDefinition, ToolError, tool

_READ = {"effect": "read", "parallel_safe": True, "idempotent": True}
_READ_HINTS = {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": True, "open_world_hint": False}

Algorithm = Literal["sha256", "sha512", "blake2b", "sha1", "md5"]


def _hash_text(text: str, algorithm: Algorithm = "sha256") -> dict[str, Any]:
    """Compute a hex digest of a UTF-8 text (default sha256). Useful to compare or fingerprint content.

    Args:
        text: The text to hash (UTF-8).
    """
    data = text.encode("utf-8")
    h = hashlib.new(algorithm, data) if algorithm != "blake2b" else hashlib.blake2b(data)
    return {"algorithm": algorithm, "hex": h.hexdigest(), "bytes": len(data)}


_PATH_TOKEN = re.compile(r"\.?([^.\[\]]+)|\[(-?\d+)\]")


def _parse_path(path: str) -> list[str | int]:
    out: list[str | int] = []
    pos = 0
    while pos < len(path):
        m = _PATH_TOKEN.match(path, pos)
        if m is None or m.end() == pos:
            raise ToolError(f"path {path!r} is malformed at character {pos}: use a.b[0].c", effect_happened=False)
        out.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
        pos = m.end()
    return out


def _json_query(document: str, path: str = "") -> dict[str, Any]:
    """Extract a value from a JSON document by a path like 'items[0].name' (dots for keys, [n] for list indices,
    negative n counts from the end). The document is JSON text, e.g. '{"items": [{"name": "a"}]}'.

    Args:
        document: The JSON document, as JSON text.
        path: Path to the value; empty selects the whole document.
    """
    # JSON text, not a JSON value: a free-form value has no strict-mode schema (an object node must
    # list its properties and close itself), and every model can write JSON text.
    try:
        doc = json.loads(document)
    except ValueError as exc:
        raise ToolError(f"document is not JSON text: {exc}", effect_happened=False) from None
    except RecursionError:
        raise ToolError("document is nested too deeply to parse", effect_happened=False) from None
    value: Any = doc
    walked = "$"
    for step in _parse_path(path):
        if isinstance(step, int):
            if not isinstance(value, list) or not -len(value) <= step < len(value):
                return {"found": False, "value": None, "stopped_at": walked}
            value = value[step]
            walked += f"[{step}]"
        else:
            if not isinstance(value, dict) or step not in value:
                return {"found": False, "value": None, "stopped_at": walked}
            value = value[step]
            walked += f".{step}"
    return {"found": True, "value": value, "stopped_at": walked}


def _now(timezone: str | None = None) -> dict[str, Any]:
    """The current time in UTC (ISO 8601 and Unix seconds), optionally also in an IANA time zone.

    Args:
        timezone: IANA zone name, e.g. 'Europe/Paris'.
    """
    now = _dt.datetime.now(_dt.UTC)
    out: dict[str, Any] = {"utc": now.isoformat(timespec="seconds").replace("+00:00", "Z"), "unix": now.timestamp()}
    zone = timezone
    if zone:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            out["local"] = now.astimezone(ZoneInfo(zone)).isoformat(timespec="seconds")
        except (ZoneInfoNotFoundError, ValueError):
            raise ToolError(f"unknown time zone {zone!r}: use an IANA name like 'Europe/Paris'", effect_happened=False) from None
        out["timezone"] = zone
    return out


def _shown(rel: str, limit: int = 80) -> str:
    """The caller's path as quoted in an error: repr'd and cut short (it may be 100 KB of anything)."""
    text = repr(rel)
    return text if len(text) <= limit else text[: limit - 5] + "...'"


def _list_dir_handler(root: Path) -> Callable[..., dict[str, Any]]:
    root = root.resolve()

    def fail(rel: str, why: str) -> ToolError:
        # Never the absolute root or the exception's own text (it embeds the full path).
        return ToolError(f"path {_shown(rel)} {why}", effect_happened=False)

    def list_dir(path: str = ".", limit: Annotated[int, Field(ge=1, le=1000)] = 200) -> dict[str, Any]:
        """List a directory under the root.

        Args:
            path: Directory relative to the root.
        """
        rel = path or "."
        try:
            target = (root / rel).resolve()
        except (OSError, ValueError, RuntimeError):  # NUL byte, unencodable, too long, symlink loop
            raise fail(rel, "is not a usable path") from None
        if target != root and root not in target.parents:
            raise fail(rel, "is outside the allowed root")
        try:
            if not target.is_dir():
                raise fail(rel, "is not a directory under the root")
            entries: list[dict[str, Any]] = []
            with os.scandir(target) as it:
                for e in sorted(it, key=lambda e: e.name):
                    if len(entries) >= limit:
                        break
                    entries.append(_entry(e))
        except ToolError:
            raise
        except (OSError, ValueError) as exc:
            why = os.strerror(exc.errno).lower() if isinstance(exc, OSError) and exc.errno else "is not a usable path"
            raise fail(rel, f"cannot be listed: {why}") from None
        shown = "." if target == root else str(target.relative_to(root))
        return {"path": shown, "entries": entries, "truncated": len(entries) >= limit}

    return list_dir


def _entry(e: os.DirEntry[str]) -> dict[str, Any]:
    try:
        kind = "dir" if e.is_dir(follow_symlinks=False) else "symlink" if e.is_symlink() else "file"
        size = e.stat(follow_symlinks=False).st_size if kind == "file" else None
    except OSError:  # removed while listing: still named, its details unknown
        return {"name": e.name, "type": "unknown", "size": None}
    return {"name": e.name, "type": kind, "size": size}


def example_tools(*, files_root: str | Path | None = None) -> list[ToolDefinition]:
    """The example tools; ``of_list_dir`` only when ``files_root`` is given."""
    tools = [
        tool(
            "of_hash_text",
            title="Hash text",
            output_schema={
                "type": "object",
                "properties": {"algorithm": {"type": "string"}, "hex": {"type": "string"}, "bytes": {"type": "integer"}},
                "required": ["algorithm", "hex", "bytes"],
            },
            blocking=False,  # pure computation on a bounded text: runs on the event loop, no thread hop
            annotations=_READ_HINTS,
            capability=_READ,
            examples=[{"text": "hello"}],
            tests=[
                {"arguments": {"text": "hello"}, "expect": {
                    "algorithm": "sha256", "bytes": 5,
                    "hex": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"}},
                {"arguments": {"text": "héllo", "algorithm": "md5"}, "match": {"bytes": 6}},
                {"arguments": {"text": "x", "algorithm": "crc32"}, "error": "invalid_params"},
            ],
        )(_hash_text),
        tool(
            "of_json_query",
            title="Query JSON",
            output_schema={
                "type": "object",
                "properties": {"found": {"type": "boolean"}, "value": {}, "stopped_at": {"type": "string"}},
                "required": ["found", "value", "stopped_at"],
            },
            blocking=False,
            annotations=_READ_HINTS,
            capability=_READ,
            tests=[
                {"arguments": {"document": '{"items": [{"name": "a"}]}', "path": "items[-1].name"},
                 "expect": {"found": True, "value": "a", "stopped_at": "$.items[-1].name"}},
                {"arguments": {"document": "[1, 2]", "path": "[5]"}, "match": {"found": False, "stopped_at": "$"}},
                {"arguments": {"document": "{not json"}, "error": "tool_error"},
            ],
        )(_json_query),
        tool(
            "of_now",
            title="Current time",
            output_schema={
                "type": "object",
                "properties": {
                    "utc": {"type": "string"},
                    "unix": {"type": "number"},
                    "local": {"type": "string"},
                    "timezone": {"type": "string"},
                },
                "required": ["utc", "unix"],
            },
            blocking=False,
            annotations={**_READ_HINTS, "idempotent_hint": False},
            capability={"effect": "read", "parallel_safe": True, "idempotent": False},
            tests=[
                {"arguments": {}, "check": lambda r: r["utc"].endswith("Z") and "local" not in r},
                {"arguments": {"timezone": "Asia/Tokyo"}, "check": lambda r: r["local"].endswith("+09:00")},
                {"arguments": {"timezone": "Mars/Olympus"}, "error": "tool_error"},
            ],
        )(_now),
    ]
    if files_root is not None:
        root = Path(files_root)
        if not root.is_dir():
            from .errors import ToolLoadError

            raise ToolLoadError(f"--files-root {root}: not a directory")
        tools.append(
            tool(
                "of_list_dir",
                title="List directory",
                # The description names the configured root, so it is not the docstring.
                description=f"List the entries of a directory under the configured root ({root.resolve()}). "
                            "Paths are relative to that root and cannot leave it.",
                output_schema={
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "entries": {"type": "array", "items": {"type": "object"}},
                        "truncated": {"type": "boolean"},
                    },
                    "required": ["path", "entries", "truncated"],
                },
                annotations=_READ_HINTS,
                capability=_READ,
                tests=[
                    {"arguments": {}, "match": {"path": "."}},
                    {"arguments": {"path": "../"}, "error": "tool_error"},
                ],
            )(_list_dir_handler(root))
        )
    return tools


__all__ = ["example_tools"]
