"""``pkg.module:attribute`` specs, resolved one way for every loader (``--module`` of the tools,
agents, workflows and gateway profiles, and the chat agent's config).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from .errors import ConfigurationError

_MISSING = object()


def search_current_dir() -> None:
    """Let ``--module mytools:registry`` find ``mytools.py`` in the current directory, as ``python -m`` would.

    A console script's ``sys.path[0]`` is its bin/ directory, not the current one, so every command that
    takes ``--module`` calls this first (or passes ``from_cwd=True`` to :func:`import_spec`).
    """
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)


def import_spec(spec: str, *, default_attr: str, what: str = "--module",
                error: type[Exception] = ConfigurationError, missing_ok: bool = False, from_cwd: bool = False) -> Any:
    """The object ``spec`` names: ``pkg.module:attr``, ``attr`` defaulting to ``default_attr``.

    Errors are ``error(message)`` naming ``what``, the spec and what was wrong (no module part, the
    import failed, no such attribute). With ``missing_ok`` a missing attribute gives ``None``.
    Calling a factory is the caller's business: what counts as one differs per loader. ``from_cwd``: a
    command line's spec, which may name a module in the current directory (:func:`search_current_dir`).
    """
    if from_cwd:
        search_current_dir()
    mod_name, _, attr = spec.partition(":")
    attr = attr or default_attr
    if not mod_name:
        raise error(f"{what} {spec!r}: use the form pkg.module:attribute")
    try:
        module = importlib.import_module(mod_name)
    except ImportError as exc:
        raise error(f"{what} {spec!r}: cannot import {mod_name!r} ({exc})") from None
    obj = getattr(module, attr, _MISSING)
    if obj is _MISSING:
        if missing_ok:
            return None
        raise error(f"{what} {spec!r}: module {mod_name!r} has no attribute {attr!r}")
    return obj


__all__ = ["import_spec", "search_current_dir"]
