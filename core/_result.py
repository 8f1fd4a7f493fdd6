"""Normalized tool results.

A handler may return: a :class:`ToolResult` (explicit MCP content blocks),
a ``dict`` (the structured payload; content is its JSON text), a ``str``
(one text block), or any other JSON value (one text block of its JSON).
Normalization happens once, in the executor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from json.encoder import encode_basestring as _encode_str  # the C encoder's string quoting (ensure_ascii=False)
from typing import TYPE_CHECKING, Any

from ._canonical import digest, dumps_checked

if TYPE_CHECKING:
    from ._receipts import Receipt
    from .errors import OpenFunctionsError


@dataclass
class ToolResult:
    """What the model sees (``content``) and the typed payload (``structured``)."""

    content: list[dict[str, Any]] = field(default_factory=list)
    structured: dict[str, Any] | None = None
    is_error: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"content": self.content, "structuredContent": self.structured, "isError": self.is_error}

    def digest(self) -> str:
        return digest(self.to_dict())

    @classmethod
    def text(cls, text: str, *, is_error: bool = False) -> ToolResult:
        return cls(content=[{"type": "text", "text": text}], is_error=is_error)


def pretty_json(value: Any) -> str:
    """The JSON text block form of a payload: indented for people, as MCP hosts show it.

    Not canonical: for digests and records use :func:`~openfunctions.core.canonical_json`.
    """
    return dumps_checked(value, pretty=True)


_SCALAR_TEXT = {True: "true", False: "false"}


def _pretty_flat(value: dict[str, Any]) -> str | None:
    """``pretty_json(value)`` for a flat object of plain scalars, built from C-encoded pieces; ``None`` otherwise.

    ``json`` has no C path with ``indent``; for the common tool payload (string
    keys, string/int/float/bool/None values) the indented text is just the
    pieces joined. Anything else (nesting, subclasses, a non-finite float)
    returns ``None`` and takes the encoder. Tests check it equals
    :func:`pretty_json` (tests/core/test_result_pretty.py).
    """
    if not value:
        return "{}"
    parts = []
    for k, v in value.items():
        if type(k) is not str:
            return None
        t = type(v)
        if t is str:
            text = _encode_str(v)
        elif t is int:
            text = int.__repr__(v)
        elif t is bool:
            text = _SCALAR_TEXT[v]
        elif v is None:
            text = "null"
        elif t is float and v - v == 0.0:  # finite (nan/inf: the encoder raises as before)
            text = float.__repr__(v)
        else:
            return None
        parts.append(_encode_str(k) + ": " + text)
    return "{\n  " + ",\n  ".join(parts) + "\n}"


def normalize(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        # Validated by the executor's digest of ``to_dict()`` right after this
        # (its error paths are the same: ``$.content…``, ``$.structuredContent…``).
        return value
    if isinstance(value, str):
        return ToolResult(content=[{"type": "text", "text": value}])
    if isinstance(value, dict):
        # The executor digests ``structured`` canonically right after this,
        # which checks its keys; the display text need not walk them twice.
        text = _pretty_flat(value)
        if text is None:
            text = dumps_checked(value, pretty=True, check_keys=False)
        return ToolResult(content=[{"type": "text", "text": text}], structured=value)
    return ToolResult(content=[{"type": "text", "text": pretty_json(value)}])


@dataclass
class DetailedResult:
    """``execute_detailed``'s answer: model content, structured payload, receipt.

    ``value`` is the handler's ordinary return value (what ``execute``
    returns). ``error`` is set when the call did not succeed; ``result``
    then holds the error text as ``isError`` content.
    """

    result: ToolResult
    receipt: Receipt
    value: Any = None
    error: OpenFunctionsError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


__all__ = ["ToolResult", "DetailedResult", "normalize", "pretty_json"]
