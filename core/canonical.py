"""Canonical JSON: the one byte form we hash, journal and compare.

Rules (stable across processes and versions; golden tests pin them):
- UTF-8, keys sorted by code point, no insignificant whitespace
  (separators ``,`` and ``:``), non-ASCII kept as is (``ensure_ascii=False``);
- only JSON values: dict with str keys, list/tuple, str, int, float
  (finite only), bool, None. Anything else (NaN, Infinity, bytes, sets,
  objects, cycles) raises :class:`NonJsonValue` naming the JSON path;
- floats use Python's shortest repr (``json`` does), integers are exact;
- tuples encode as arrays. Keys of type int/float/bool/None are refused by
  :func:`check_json`; the fast path of :func:`canonical_json` relies on
  ``json.dumps`` and, like it, would write such keys as strings — values
  from the wire and from ``check_json``-checked handlers never have them.

Fast path: ``json.dumps(allow_nan=False)`` in C; only when it fails do we
walk the value in Python to name the offending JSON path.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from .errors import NonJsonValue

_MAX_DEPTH = 256


def check_json(value: Any, path: str = "$") -> None:
    """Raise :class:`NonJsonValue` if ``value`` has no exact JSON form."""
    _check(value, path, set(), 0)


def _check(value: Any, path: str, seen: set[int], depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise NonJsonValue(f"value at {path} nests deeper than {_MAX_DEPTH} levels", details={"path": path})
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NonJsonValue(f"value at {path} is {value!r}, which JSON cannot represent", details={"path": path})
        return
    if isinstance(value, (dict, list, tuple)):
        if id(value) in seen:
            raise NonJsonValue(f"value at {path} contains a reference cycle", details={"path": path})
        seen.add(id(value))
        try:
            if isinstance(value, dict):
                for k, v in value.items():
                    if not isinstance(k, str):
                        raise NonJsonValue(
                            f"object at {path} has a non-string key {k!r}", details={"path": path}
                        )
                    _check(v, f"{path}.{k}", seen, depth + 1)
            else:
                for i, v in enumerate(value):
                    _check(v, f"{path}[{i}]", seen, depth + 1)
        finally:
            seen.discard(id(value))
        return
    raise NonJsonValue(
        f"value at {path} is of type {type(value).__name__}, which has no JSON form",
        details={"path": path, "type": type(value).__name__},
    )


def _explain(value: Any, path: str, exc: Exception) -> NonJsonValue:
    try:
        check_json(value, path)
    except NonJsonValue as precise:
        return precise
    return NonJsonValue(f"value at {path} has no JSON form: {exc}", details={"path": path})


def dumps_checked(value: Any, *, path: str = "$", **kw: Any) -> str:
    """``json.dumps(value, allow_nan=False, ensure_ascii=False, **kw)`` raising :class:`NonJsonValue`."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, **kw)
    except (ValueError, TypeError, RecursionError) as exc:
        raise _explain(value, path, exc) from None


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value``; :class:`NonJsonValue` names what has no JSON form."""
    return dumps_checked(value, sort_keys=True, separators=(",", ":"))


def _surrogate_path(value: Any, path: str) -> str | None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return path
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _surrogate_path(k, f"{path}.<key>") or _surrogate_path(v, f"{path}.{k}")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = _surrogate_path(v, f"{path}[{i}]")
            if found:
                return found
    return None


def to_utf8(text: str, value: Any, path: str = "$") -> bytes:
    """Encode canonical text; a lone surrogate (legal in a Python str and in
    a JSON ``\\ud800`` escape, not in UTF-8) raises :class:`NonJsonValue` naming its path."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        where = _surrogate_path(value, path) or path
        raise NonJsonValue(
            f"string at {where} contains a lone surrogate, which has no UTF-8 form", details={"path": where}
        ) from None


def canonical_bytes(value: Any) -> bytes:
    return to_utf8(canonical_json(value), value)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def digest(value: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``value``."""
    return "sha256:" + sha256_hex(canonical_bytes(value))


__all__ = ["to_utf8", "dumps_checked", "canonical_json", "canonical_bytes", "check_json", "digest", "sha256_hex"]
