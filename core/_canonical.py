"""Canonical JSON: the one byte form we hash, journal and compare.

Rules (stable across processes and versions; golden tests pin them):
- UTF-8, keys sorted by code point, no insignificant whitespace
  (separators ``,`` and ``:``), non-ASCII kept as is (``ensure_ascii=False``);
- only JSON values: dict with str keys, list/tuple, str, int, float
  (finite only), bool, None. Anything else (NaN, Infinity, bytes, sets,
  objects, cycles) raises :class:`NonJsonValue` naming the JSON path;
- floats use Python's shortest repr (``json`` does), integers are exact;
- tuples encode as arrays. Keys must be strings: ``json.dumps`` would
  silently write ``{1: "x"}`` as ``{"1": "x"}``, so after the C encoder
  succeeds a cheap walk over containers (scalars are skipped) refuses
  non-string keys.

Fast path: ``json.dumps(allow_nan=False)`` in C; only when it fails do we
walk the value in Python to name the offending JSON path.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
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


_CONTAINERS = (dict, list, tuple)
_SCALAR_TYPES = frozenset({str, int, float, bool, type(None)})


def _keys_are_strings(value: Any) -> bool:
    # Runs only after the C encoder succeeded, so there are no cycles and
    # every leaf is a JSON scalar; only containers (subclasses included) need
    # a look. Shaped for the common flat object: C-level passes over the key
    # types and the value types, a Python loop only where containers nest.
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if v and set(map(type, v)) != {str} and not all(isinstance(k, str) for k in v):
                return False
            items = v.values()
        else:
            items = v
        if not _SCALAR_TYPES.issuperset(map(type, items)):
            stack.extend(x for x in items if isinstance(x, _CONTAINERS))
    return True


# Built once: json.dumps would construct an encoder on every call (hot path).
_CANONICAL = json.JSONEncoder(ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":"))
_PRETTY = json.JSONEncoder(ensure_ascii=False, allow_nan=False, indent=2)


def _refuse(o: Any) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def _c_canonical() -> Callable[[Any], str]:
    """The C encoder ``_CANONICAL.encode`` would build, built once.

    ``JSONEncoder.encode`` constructs a new C encoder on every call, which is
    a third of the cost of encoding a small object. Same arguments, except
    ``markers=None``: a cycle then ends in RecursionError instead of
    ValueError (both are caught and explained). Checked against the Python
    path on import; any difference (another CPython, no C accelerator)
    falls back to ``_CANONICAL.encode``.
    """
    try:
        from _json import make_encoder
        from json.encoder import encode_basestring

        enc = make_encoder(None, _refuse, encode_basestring, None, ":", ",", True, False, False)

        def encode(value: Any) -> str:
            return "".join(enc(value, 0))

        probe = {"b": [1, 2.5, None, True, "\u00e9\n"], "a": {"z": -0.0, "y": 10**30}, "": "x"}
        if encode(probe) == _CANONICAL.encode(probe) and encode("é") == _CANONICAL.encode("é"):
            return encode
    except Exception:  # pragma: no cover - no C accelerator or another signature
        pass
    return _CANONICAL.encode  # pragma: no cover


_encode_canonical = _c_canonical()


def _encode_checked(encode: Callable[[Any], str], value: Any, path: str, check_keys: bool) -> str:
    try:
        text = encode(value)
    except (ValueError, TypeError, RecursionError) as exc:
        raise _explain(value, path, exc) from None
    if check_keys and isinstance(value, _CONTAINERS) and not _keys_are_strings(value):
        raise _explain(value, path, TypeError("non-string key"))
    return text


def dumps_checked(value: Any, *, path: str = "$", pretty: bool = False, check_keys: bool = True) -> str:
    """Canonical (or ``pretty``, indent 2) JSON of ``value``, raising :class:`NonJsonValue`.

    ``check_keys=False`` skips the string-key walk; only for display text of
    a value whose canonical form is checked anyway.
    """
    return _encode_checked(_PRETTY.encode if pretty else _encode_canonical, value, path, check_keys)


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value``; :class:`NonJsonValue` names what has no JSON form."""
    return _encode_checked(_encode_canonical, value, "$", True)


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
