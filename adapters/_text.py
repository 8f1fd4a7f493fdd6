"""Text from outside made valid where it enters: lone surrogates become U+FFFD.

A Python ``str`` may hold a lone surrogate (``"\\udc80"``): JSON's
``"\\udc80"`` escape decodes to one, and so do some ``surrogateescape``
paths. UTF-8 has no form for it, so a record holding one cannot be written
(``NonJsonValue``); a run journal that meets such a record would stop
(fail-stop is for I/O faults, not for a model's odd reply). So text that
comes from something we did not write (a provider's or a sampling host's
reply, a tool's result on its way into a run, a chat user's message) goes
through :func:`valid_text` (or :func:`valid_json` for a JSON value) where it
enters: each lone surrogate is replaced by U+FFFD, everything else is kept.
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (the same object when there is none)."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)


def valid_json(value: Any) -> Any:
    """A JSON value (dicts, lists, strings, scalars) with :func:`valid_text` applied to every string and key.

    Returns ``value`` itself when nothing needed replacing; otherwise a copy of the containers on the way.
    """
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, dict):
        out = {valid_text(k) if isinstance(k, str) else k: valid_json(v) for k, v in value.items()}
        return value if _same(out, value) else out
    if isinstance(value, (list, tuple)):
        items = [valid_json(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items if isinstance(value, list) else tuple(items)
    return value


def _same(new: dict[Any, Any], old: dict[Any, Any]) -> bool:
    return all(nk is ok and nv is ov for (nk, nv), (ok, ov) in zip(new.items(), old.items(), strict=True))


__all__ = ["valid_json", "valid_text"]
