"""Workspace paths and glob patterns (private; used by catalog, steps, authority, verification).

Patterns are relative to the workspace root and use ``/`` separators:

- ``*`` matches any run of characters inside one path segment (not ``/``);
- ``?`` matches one character inside a segment;
- ``**`` as a whole segment matches zero or more whole segments
  (``src/**`` matches every file below ``src``; ``**/*.py`` every ``.py``
  file at any depth);
- everything else is literal (no character classes, no braces).

A pattern always matches the *whole* relative path. Patterns themselves are
checked when the catalog or a grant is loaded: no absolute patterns, no
``..`` segments, no empty segments.

:func:`resolve_in_workspace` is the one place a caller-supplied path becomes
a filesystem path: it refuses absolute paths, ``..`` segments and NUL bytes
lexically, then resolves every symlink (``os.path.realpath``) and requires the
result to stay inside the (resolved) workspace. Pattern checks then run on the
*resolved* relative path, so a symlink inside ``src/`` pointing at ``../etc``
is judged by where it points, not by its name.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from ._errors import PathOutsideGrant

MAX_PATH_CHARS = 4096


def check_pattern(pattern: object) -> str | None:
    """Return a reason the pattern is unusable, or ``None`` if it is fine."""
    if not isinstance(pattern, str) or not pattern:
        return "a pattern must be a non-empty string"
    if "\x00" in pattern:
        return "a pattern must not contain NUL"
    if pattern.startswith("/") or re.match(r"^[A-Za-z]:", pattern):
        return f"pattern {pattern!r} is absolute; patterns are relative to the workspace"
    segs = pattern.split("/")
    if any(s == ".." for s in segs):
        return f"pattern {pattern!r} contains '..'"
    if any(s == "" for s in segs):
        return f"pattern {pattern!r} has an empty segment (leading, trailing or doubled '/')"
    if any(s == "." for s in segs):
        return f"pattern {pattern!r} contains a '.' segment"
    if any("**" in s and s != "**" for s in segs):
        return f"pattern {pattern!r}: '**' must be a whole segment"
    return None


@functools.lru_cache(maxsize=512)
def _compile(pattern: str) -> re.Pattern[str]:
    segs = pattern.split("/")
    out = ""
    for i, seg in enumerate(segs):
        last = i == len(segs) - 1
        if seg == "**":
            # zero or more whole segments; as the last segment, one or more
            # (``src/**`` names what is below src, not src itself)
            out += ".+" if last else "(?:[^/]+/)*"
            continue
        part = ""
        for ch in seg:
            if ch == "*":
                part += "[^/]*"
            elif ch == "?":
                part += "[^/]"
            else:
                part += re.escape(ch)
        out += part + ("" if last else "/")
    return re.compile(out)


def matches(relpath: str, pattern: str) -> bool:
    """Whether a ``/``-separated relative path matches a pattern (whole path)."""
    return _compile(pattern).fullmatch(relpath) is not None


def matching_pattern(relpath: str, patterns: tuple[str, ...] | list[str]) -> str | None:
    for p in patterns:
        if matches(relpath, p):
            return p
    return None


def resolve_in_workspace(workspace: Path, path: str, *, what: str = "path") -> tuple[Path, str]:
    """Resolve a caller-supplied relative path inside ``workspace``.

    Returns ``(real_path, relpath)`` where ``relpath`` is the resolved path
    relative to the resolved workspace, ``/``-separated. Raises
    :class:`PathOutsideGrant` for absolute paths, ``..``, NUL, or a path
    that (after symlinks) lands outside the workspace.
    """
    if not isinstance(path, str) or not path:
        raise PathOutsideGrant(f"{what} must be a non-empty relative path", details={"path": path})
    if "\x00" in path or len(path) > MAX_PATH_CHARS:
        raise PathOutsideGrant(f"{what} {path[:80]!r} is not a usable path", details={"path": path[:200]})
    if os.path.isabs(path) or path.startswith("~") or re.match(r"^[A-Za-z]:", path):
        raise PathOutsideGrant(
            f"{what} {path!r} is absolute; paths must be relative to the workspace", details={"path": path}
        )
    segs = [s for s in path.replace("\\", "/").split("/")]
    if any(s == ".." for s in segs):
        raise PathOutsideGrant(f"{what} {path!r} contains '..'; paths must stay inside the workspace", details={"path": path})
    root = Path(os.path.realpath(workspace))
    real = Path(os.path.realpath(os.path.join(root, path)))
    try:
        rel = real.relative_to(root)
    except ValueError:
        raise PathOutsideGrant(
            f"{what} {path!r} resolves (through a symlink) to {str(real)!r}, outside the workspace",
            details={"path": path, "resolved": str(real)},
        ) from None
    relpath = rel.as_posix()
    if relpath in ("", "."):
        raise PathOutsideGrant(f"{what} {path!r} names the workspace root itself", details={"path": path})
    return real, relpath


__all__: list[str] = []  # private module
