"""JSON Schema handling: dialect selection, compiled validators, violations.

A schema's ``$schema`` selects its dialect; without one we use 2020-12 (the
MCP default). Draft-07 is accepted too. Validators are compiled once per
schema object (``Validator``) and reused for every call.
"""

from __future__ import annotations

from typing import Any

import jsonschema
from jsonschema import Draft7Validator, Draft202012Validator
from jsonschema.exceptions import SchemaError

from .errors import InvalidOutput, InvalidParams, ToolDefinitionError

DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SUPPORTED_DIALECTS = {
    "https://json-schema.org/draft/2020-12/schema": Draft202012Validator,
    "http://json-schema.org/draft-07/schema#": Draft7Validator,
    "http://json-schema.org/draft-07/schema": Draft7Validator,
}
MAX_VIOLATIONS = 20


def _json_path(parts: Any) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


class Validator:
    """A compiled validator for one schema, in the dialect its ``$schema`` selects."""

    __slots__ = ("schema", "dialect", "_v", "_trivial")

    def __init__(self, schema: dict[str, Any], *, what: str = "schema") -> None:
        if not isinstance(schema, dict):
            raise ToolDefinitionError(f"{what} must be a JSON object, got {type(schema).__name__}")
        dialect = schema.get("$schema", DEFAULT_DIALECT)
        cls = SUPPORTED_DIALECTS.get(dialect)
        if cls is None:
            raise ToolDefinitionError(
                f"{what} selects unsupported JSON Schema dialect {dialect!r}; "
                f"supported: {sorted(set(SUPPORTED_DIALECTS))}"
            )
        try:
            cls.check_schema(schema)
        except SchemaError as exc:
            raise ToolDefinitionError(f"{what} is not a valid {dialect} schema: {exc.message}") from None
        self.schema = schema
        self.dialect = dialect
        self._v = cls(schema, format_checker=cls.FORMAT_CHECKER)
        # `{"type": "object"}` with nothing else is common and needs no walk.
        self._trivial = schema in ({"type": "object"}, {})

    def violations(self, instance: Any) -> list[dict[str, str]]:
        if self._trivial and (not self.schema or isinstance(instance, dict)):
            return []
        errors = sorted(self._v.iter_errors(instance), key=lambda e: (list(map(str, e.absolute_path)), e.message))
        return [{"path": _json_path(e.absolute_path), "message": _clip(e.message)} for e in errors]

    def check_params(self, tool: str, params: Any) -> None:
        found = self.violations(params)
        if found:
            raise InvalidParams(_summarize(f"invalid arguments for tool {tool!r}", found), details=_capped(found))

    def check_output(self, tool: str, payload: Any) -> None:
        found = self.violations(payload)
        if found:
            raise InvalidOutput(_summarize(f"output of tool {tool!r} does not match its output schema", found), details=_capped(found))


def _capped(found: list[dict[str, str]]) -> dict[str, Any]:
    return {"violations": found[:MAX_VIOLATIONS], "violation_count": len(found)}


def _summarize(head: str, found: list[dict[str, str]]) -> str:
    shown = "; ".join(f"{v['path']}: {v['message']}" for v in found[:MAX_VIOLATIONS])
    more = f" (and {len(found) - MAX_VIOLATIONS} more)" if len(found) > MAX_VIOLATIONS else ""
    return f"{head}: {shown}{more}"


__all__ = ["Validator", "DEFAULT_DIALECT", "SUPPORTED_DIALECTS", "MAX_VIOLATIONS", "jsonschema"]


def _clip(message: str, limit: int = 300) -> str:
    # jsonschema quotes the offending instance; an oversized argument must not
    # turn one violation into megabytes of error text.
    return message if len(message) <= limit else message[: limit - 1] + "…"
