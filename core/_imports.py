"""``pkg.module:attribute`` specs, resolved one way for every loader (``--module`` of the tools,
agents, workflows and gateway profiles, and the chat agent's config).
"""

from __future__ import annotations

import importlib
from typing import Any

from .errors import ConfigurationError

_MISSING = object()


def import_spec(spec: str, *, default_attr: str, what: str = "--module",
                error: type[Exception] = ConfigurationError, missing_ok: bool = False) -> Any:
    """The object ``spec`` names: ``pkg.module:attr``, ``attr`` defaulting to ``default_attr``.

    Errors are ``error(message)`` naming ``what``, the spec and what was wrong (no module part, the
    import failed, no such attribute). With ``missing_ok`` a missing attribute gives ``None``.
    Calling a factory is the caller's business: what counts as one differs per loader.
    """
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


__all__ = ["import_spec"]
