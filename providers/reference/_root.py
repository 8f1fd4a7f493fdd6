"""A directory the reference providers read (and the tasks provider writes), and nothing outside it.

Every path a tool receives is relative to the configured root. It is refused
(``ToolError``, refused: nothing ran) when it is absolute, contains ``..``,
holds a NUL byte, or resolves (symlinks followed) to a place outside the
root: a symlink inside the vault that points at ``/etc`` is not a way out.
Directory walks never descend into symlinked directories and skip files
whose real path is outside the root, and hidden entries (``.git``,
``.obsidian``, ``.trash``). Reads are bounded: a file over ``max_bytes`` is
read up to that size and marked truncated.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from openfunctions.core import ToolError

from .._errors import ProviderUnavailable

#: Stable error codes of the reference providers' tools.
PATH_INVALID = "reference_path_invalid"
PATH_OUTSIDE = "reference_path_outside_root"
NOT_FOUND = "reference_not_found"


def refuse(code: str, message: str, **details: object) -> ToolError:
    """A clean refusal: the tool did nothing (receipt ``rejected``/``known``)."""
    return ToolError(message, code=code, refused=True, details=dict(details))


class Root:
    """A confined directory. ``what`` names it in errors ("vault", "repository", ...)."""

    def __init__(self, path: str | os.PathLike[str], *, what: str) -> None:
        self.given = str(path)
        self.what = what
        self.real = os.path.realpath(os.fspath(path))

    def check(self) -> None:
        """Raise :class:`ProviderUnavailable` unless the root is a readable directory."""
        if not os.path.isdir(self.real):
            raise ProviderUnavailable(f"{self.what} directory {self.given!r} does not exist or is not a directory")
        if not os.access(self.real, os.R_OK | os.X_OK):
            raise ProviderUnavailable(f"{self.what} directory {self.given!r} is not readable")

    def resolve(self, rel: object, *, must_exist: bool = True, closed: Callable[[str], bool] | None = None) -> Path:
        """The real path of ``rel`` inside the root, or a refusal naming what was wrong.

        ``closed(part)``: path parts that are off limits (``.git`` for the repository: its config may hold
        credentials), checked on the given path and on where it resolves to.
        """
        if not isinstance(rel, str) or not rel.strip():
            raise refuse(PATH_INVALID, f"a path inside the {self.what} is required, got {rel!r}")
        if "\x00" in rel or len(rel) > 4096:
            raise refuse(PATH_INVALID, f"path {rel[:80]!r} is not a valid path")
        posix = PurePosixPath(rel.replace("\\", "/"))
        if posix.is_absolute() or os.path.isabs(rel):
            raise refuse(PATH_OUTSIDE, f"path {rel!r} is absolute: give a path relative to the {self.what}", path=rel)
        if ".." in posix.parts:
            raise refuse(PATH_OUTSIDE, f"path {rel!r} leaves the {self.what} ('..' is not allowed)", path=rel)
        real = os.path.realpath(os.path.join(self.real, *posix.parts))
        if not self.contains(real):
            raise refuse(PATH_OUTSIDE, f"path {rel!r} resolves outside the {self.what} (a symlink?)", path=rel)
        if closed is not None:
            inside = PurePosixPath(os.path.relpath(real, self.real)).parts
            bad = next((p for p in (*posix.parts, *inside) if closed(p)), None)
            if bad is not None:
                raise refuse(PATH_INVALID, f"path {rel!r} is in {bad!r}, which these tools do not open", path=rel)
        if must_exist and not os.path.exists(real):
            raise refuse(NOT_FOUND, f"no {rel!r} in the {self.what}", path=rel)
        return Path(real)

    def contains(self, real: str) -> bool:
        return real == self.real or real.startswith(self.real.rstrip(os.sep) + os.sep)

    def relative(self, real: str | os.PathLike[str]) -> str:
        return PurePosixPath(Path(os.path.relpath(os.fspath(real), self.real))).as_posix()

    def walk(self, suffixes: tuple[str, ...], *, under: Path | None = None, limit: int = 20_000) -> Iterator[Path]:
        """Files under the root (or ``under``) ending in one of ``suffixes``, sorted, at most ``limit``."""
        count = 0
        start = os.fspath(under or self.real)
        for dirpath, dirnames, filenames in os.walk(start, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.startswith(".") or not name.lower().endswith(suffixes):
                    continue
                full = os.path.join(dirpath, name)
                if os.path.islink(full) and not self.contains(os.path.realpath(full)):
                    continue
                if not os.path.isfile(full):
                    continue
                yield Path(full)
                count += 1
                if count >= limit:
                    return


def read_bounded(path: Path, max_bytes: int) -> tuple[str, bool]:
    """Up to ``max_bytes`` of a text file (invalid UTF-8 replaced) and whether it was cut."""
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    cut = len(data) > max_bytes
    return data[:max_bytes].decode("utf-8", errors="replace"), cut


def clip(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


__all__ = ["NOT_FOUND", "PATH_INVALID", "PATH_OUTSIDE", "Root", "clip", "read_bounded", "refuse"]
