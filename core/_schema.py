"""JSON Schema handling: dialect selection, compiled validators, violations.

A schema's ``$schema`` selects its dialect; without one we use 2020-12 (the
MCP default). Draft-07 is accepted too. Validators are compiled once per
schema object (``Validator``) and reused for every call.

Fast path: most tool schemas are plain objects of typed properties. For a
schema that uses only the keywords listed in :data:`FAST_KEYWORDS` (whose
meaning is the same in both dialects), ``Validator`` also compiles a plain
Python predicate, once, and a call whose instance passes it is valid without
walking jsonschema's iterators (about 10x cheaper per call). The predicate only
ever *accepts*: an instance it does not accept, or a schema using any other
keyword (``$ref``, ``format``, ``patternProperties``, ...), goes through
jsonschema exactly as before, so every violation message comes from there.
"""

from __future__ import annotations

import copy
import json
import operator
import re
from collections.abc import Callable
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

    __slots__ = ("schema", "dialect", "_v", "_trivial", "_accepts")

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
        #: A predicate that accepts only valid instances (see the module docstring), or None.
        self._accepts = compile_fast_check(schema)

    def violations(self, instance: Any) -> list[dict[str, str]]:
        if self._trivial and (not self.schema or isinstance(instance, dict)):
            return []
        accepts = self._accepts
        if accepts is not None and accepts(instance):
            return []
        errors = sorted(self._v.iter_errors(instance), key=lambda e: (list(map(str, e.absolute_path)), e.message))
        return [{"path": _json_path(e.absolute_path), "message": _clip(_json_message(e))} for e in errors]

    def check_params(self, tool: str, params: Any) -> None:
        found = self.violations(params)
        if found:
            raise InvalidParams(_summarize(f"invalid arguments for tool {tool!r}", found), details=_capped(found))

    def check_output(self, tool: str, payload: Any) -> None:
        found = self.violations(payload)
        if found:
            raise InvalidOutput(_summarize(f"output of tool {tool!r} does not match its output schema", found), details=_capped(found))


# -- fast path -----------------------------------------------------------------

#: Keywords with no effect on validity (annotations), skipped by the fast path.
_ANNOTATION_KEYWORDS = frozenset({
    "$schema", "$comment", "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
})
#: Keywords the fast path compiles; a (sub)schema with any other keyword has no fast path.
FAST_KEYWORDS = frozenset({
    "type", "enum", "const", "minLength", "maxLength", "pattern", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "anyOf",
})

Check = Callable[[Any], bool]


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# jsonschema's type checker for both dialects (draft 6 on: an integral float is an integer).
_TYPE_TESTS: dict[str, Check] = {
    "object": lambda x: isinstance(x, dict),
    "array": lambda x: isinstance(x, list),
    "string": lambda x: isinstance(x, str),
    "boolean": lambda x: isinstance(x, bool),
    "null": lambda x: x is None,
    "number": _is_number,
    "integer": lambda x: (isinstance(x, int) and not isinstance(x, bool)) or (isinstance(x, float) and x.is_integer()),
}


def _all(checks: list[Check]) -> Check:
    if not checks:
        return lambda x: True
    if len(checks) == 1:
        return checks[0]
    tup = tuple(checks)
    return lambda x: all(c(x) for c in tup)


def compile_fast_check(schema: Any) -> Check | None:
    """A predicate true only for instances valid against ``schema``, or None when ``schema`` leaves the fast subset.

    Mirrors jsonschema's keyword semantics exactly for :data:`FAST_KEYWORDS`
    (each keyword applies only to instances of its type, as there). ``False``
    from the predicate proves nothing: the caller then asks jsonschema.
    """
    if schema is True:
        return lambda x: True
    if not isinstance(schema, dict):
        return None
    if any(k not in FAST_KEYWORDS and k not in _ANNOTATION_KEYWORDS for k in schema):
        return None
    checks: list[Check] = []
    if "type" in schema:
        t = schema["type"]
        names = [t] if isinstance(t, str) else t
        if not isinstance(names, list) or not names or any(n not in _TYPE_TESTS for n in names):
            return None
        tests = tuple(_TYPE_TESTS[n] for n in names)
        checks.append(tests[0] if len(tests) == 1 else (lambda x: any(f(x) for f in tests)))
    for key in ("enum", "const"):
        if key not in schema:
            continue
        values = schema["enum"] if key == "enum" else [schema["const"]]
        # Strings only: jsonschema's equality treats 1, 1.0 and True specially.
        if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
            return None
        checks.append(_one_of(frozenset(values)))
    if not _string_checks(schema, checks) or not _number_checks(schema, checks):
        return None
    if not _object_checks(schema, checks) or not _array_checks(schema, checks):
        return None
    if "anyOf" in schema:
        subs = schema["anyOf"]
        if not isinstance(subs, list) or not subs:
            return None
        compiled = [compile_fast_check(s) for s in subs]
        if any(c is None for c in compiled):
            return None
        branches = tuple(c for c in compiled if c is not None)
        checks.append(lambda x: any(c(x) for c in branches))
    return _all(checks)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _string_checks(schema: dict[str, Any], checks: list[Check]) -> bool:
    lo, hi, pattern = schema.get("minLength"), schema.get("maxLength"), schema.get("pattern")
    if (lo is not None and not _count(lo)) or (hi is not None and not _count(hi)):
        return False
    if lo is not None or hi is not None:
        lo_, hi_ = lo or 0, hi
        checks.append(lambda x: not isinstance(x, str) or (len(x) >= lo_ and (hi_ is None or len(x) <= hi_)))
    if pattern is not None:
        if not isinstance(pattern, str):
            return False
        try:
            search = re.compile(pattern).search
        except re.error:
            return False
        checks.append(lambda x: not isinstance(x, str) or search(x) is not None)
    return True


def _one_of(allowed: frozenset[str]) -> Check:
    return lambda x: isinstance(x, str) and x in allowed


# keyword -> the comparison that makes an instance fail it (as jsonschema words it)
_BOUND_FAILS: dict[str, Callable[[Any, Any], bool]] = {
    "minimum": operator.lt, "maximum": operator.gt, "exclusiveMinimum": operator.le, "exclusiveMaximum": operator.ge,
}


def _bound(fails: Callable[[Any, Any], bool], bound: Any) -> Check:
    return lambda x: not _is_number(x) or not fails(x, bound)


def _number_checks(schema: dict[str, Any], checks: list[Check]) -> bool:
    for key, fails in _BOUND_FAILS.items():
        if key in schema:
            if not _is_number(schema[key]):
                return False
            checks.append(_bound(fails, schema[key]))
    return True


def _object_checks(schema: dict[str, Any], checks: list[Check]) -> bool:
    props = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(props, dict) or not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return False
    compiled: dict[str, Check] = {}
    for name, sub in props.items():
        c = compile_fast_check(sub)
        if c is None:
            return False
        compiled[name] = c
    closed = extra is False
    extra_check = None if extra is True or closed else compile_fast_check(extra)
    if extra_check is None and not (extra is True or closed):
        return False
    if not compiled and not required and extra is True:
        return True
    need = tuple(required)

    def check_object(x: Any) -> bool:
        if not isinstance(x, dict):
            return True
        for name in need:
            if name not in x:
                return False
        for key, value in x.items():
            c = compiled.get(key)
            if c is not None:
                if not c(value):
                    return False
            elif closed:
                return False
            elif extra_check is not None and not extra_check(value):
                return False
        return True

    checks.append(check_object)
    return True


def _array_checks(schema: dict[str, Any], checks: list[Check]) -> bool:
    lo, hi = schema.get("minItems"), schema.get("maxItems")
    if (lo is not None and not _count(lo)) or (hi is not None and not _count(hi)):
        return False
    if lo is not None or hi is not None:
        lo_, hi_ = lo or 0, hi
        checks.append(lambda x: not isinstance(x, list) or (len(x) >= lo_ and (hi_ is None or len(x) <= hi_)))
    if "items" in schema:
        item = compile_fast_check(schema["items"])  # a list (draft-07 tuple form) or false: no fast path
        if item is None:
            return False
        checks.append(lambda x: not isinstance(x, list) or all(item(v) for v in x))
    return True


def _capped(found: list[dict[str, str]]) -> dict[str, Any]:
    return {"violations": found[:MAX_VIOLATIONS], "violation_count": len(found)}


def _summarize(head: str, found: list[dict[str, str]]) -> str:
    shown = "; ".join(f"{v['path']}: {v['message']}" for v in found[:MAX_VIOLATIONS])
    more = f" (and {len(found) - MAX_VIOLATIONS} more)" if len(found) > MAX_VIOLATIONS else ""
    return f"{head}: {shown}{more}"


def _as_json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def _json_message(error: Any) -> str:
    """jsonschema's message with the values it quotes written as JSON (``null``, ``true``, ``"x"``), not Python reprs.

    jsonschema builds messages from ``repr()``; a client sent JSON and should read JSON back.
    """
    message: str = error.message
    if error.validator == "required":
        missing = message.split(" is a required property")[0]
        for name in error.validator_value or ():
            if repr(name) == missing:
                return f"{_as_json(name)} is a required property"
        return message
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        for key in error.instance:
            message = message.replace(repr(key), _as_json(key))
        return message
    if error.validator == "type":
        types = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return f"{_as_json(error.instance)} is not of type {' or '.join(_as_json(t) for t in types)}"
    head = repr(error.instance)
    if message.startswith(head):
        message = _as_json(error.instance) + message[len(head):]
    value_repr = repr(error.validator_value)
    if error.validator in ("enum", "const") and value_repr in message:
        message = message.replace(value_repr, _as_json(error.validator_value))
    return message


# -- strict-mode schemas ---------------------------------------------------------
#
# The strict modes of the major providers (OpenAI structured outputs and
# strict function calling, Anthropic strict tool use, Gemini's schema subset)
# agree on: every object node closed (``additionalProperties: false``) and
# listing ``required``, every node typed. OpenAI's strict mode also makes
# every property required, so a strict client can only say "use the default"
# by sending ``null``: an optional parameter must accept ``null``, meaning
# "absent".

JSON_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
_COMBINATORS = ("anyOf", "oneOf", "allOf")
_TYPING_KEYS = ("type", "$ref", "enum", "const", *_COMBINATORS)
_META_KEYS = ("title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly")


def _subschemas(node: dict[str, Any], path: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, sub in (node.get("properties") or {}).items():
        out.append((f"{path}.{name}", sub))
    items = node.get("items")
    if isinstance(items, dict):
        out.append((f"{path}[]", items))
    for i, sub in enumerate(node.get("prefixItems") or ()):
        out.append((f"{path}[{i}]", sub))
    if isinstance(node.get("additionalProperties"), dict):
        out.append((f"{path}.*", node["additionalProperties"]))
    for key in _COMBINATORS:
        for i, sub in enumerate(node.get(key) or ()):
            out.append((f"{path}/{key}/{i}", sub))
    for key in ("$defs", "definitions"):
        for name, sub in (node.get(key) or {}).items():
            out.append((f"#/{key}/{name}", sub))
    return out


def _is_object_node(node: dict[str, Any]) -> bool:
    return node.get("type") == "object" or "properties" in node


def accepts_null(node: Any) -> bool:
    """Whether a (sub)schema admits JSON ``null``, judged from its structure (``$ref`` counts as no)."""
    if node is True or node == {}:
        return True
    if not isinstance(node, dict):
        return False
    if "const" in node:
        return node["const"] is None
    if "enum" in node:
        return None in node["enum"]
    t = node.get("type")
    if t is not None:
        return t == "null" or (isinstance(t, list) and "null" in t)
    if any(k in node for k in ("anyOf", "oneOf")):
        return any(accepts_null(sub) for k in ("anyOf", "oneOf") for sub in node.get(k) or ())
    if "allOf" in node:
        return all(accepts_null(sub) for sub in node["allOf"])
    return "$ref" not in node and "not" not in node  # an untyped node admits anything


def _nullable(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    t = node.get("type")
    if t is not None and "enum" not in node and "const" not in node and not any(k in node for k in _COMBINATORS):
        return {**node, "type": [*(t if isinstance(t, list) else [t]), "null"]}
    meta = {k: node[k] for k in _META_KEYS if k in node}
    rest = {k: v for k, v in node.items() if k not in meta}
    return {"anyOf": [rest, {"type": "null"}], **meta}


def complete_strict_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], frozenset[str]]:
    """Complete a *closed* input schema to the strict form; return it and the optional names that now take ``null``.

    A schema is closed when its root says ``additionalProperties: false``
    (pydantic's ``extra="forbid"``, every hand-written tool here); an open
    schema is returned unchanged, because it may be a peer's exact fixture.
    On a closed schema: every closed object node without ``required`` gets
    ``"required": []`` (what an absent ``required`` means anyway), and every
    optional top-level property that rejects ``null`` is made nullable. A
    schema that names its dialect (``$schema``) is a document its author wants
    served verbatim, and is kept too. The
    executor drops such a ``null`` before validation, so the handler sees the
    parameter absent (its default), exactly as if the client had left it out.
    """
    if not isinstance(schema, dict) or schema.get("additionalProperties") is not False or "$schema" in schema:
        return schema, frozenset()
    out = copy.deepcopy(schema)

    def close(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            return
        if _is_object_node(node) and node.get("additionalProperties") is False and "required" not in node:
            node["required"] = []
        for sub_path, sub in _subschemas(node, path):
            close(sub, sub_path)

    close(out, "$")
    required = set(out.get("required") or ())
    absent: set[str] = set()
    props = out.get("properties") or {}
    for name, sub in list(props.items()):
        if name not in required and not accepts_null(sub):
            props[name] = _nullable(sub)
            absent.add(name)
    return out, frozenset(absent)


def strict_violations(schema: Any) -> list[str]:
    """Where ``schema`` breaks the providers' shared strict-mode rules, as ``"<path>: <rule>"`` lines.

    Rules: an object node (``type: object`` or ``properties``) says
    ``additionalProperties: false`` and lists ``required``; every node is typed
    (``type``, ``enum``, ``const``, ``$ref`` or a combinator). A node typed as
    any JSON value (all seven JSON types) passes: Anthropic and Gemini take it,
    OpenAI's strict mode cannot express it (such a tool runs non-strict there).
    """
    found: list[str] = []

    def walk(node: Any, path: str) -> None:
        if not isinstance(node, dict):
            found.append(f"{path}: a boolean schema is not typed")
            return
        if not any(k in node for k in _TYPING_KEYS):
            found.append(f"{path}: no type")
        if _is_object_node(node):
            if node.get("additionalProperties") is not False:
                found.append(f"{path}: additionalProperties is not false")
            if "required" not in node:
                found.append(f"{path}: no required list")
        for sub_path, sub in _subschemas(node, path):
            walk(sub, sub_path)

    walk(schema, "$")
    return found


__all__ = [
    "Validator", "DEFAULT_DIALECT", "FAST_KEYWORDS", "compile_fast_check", "SUPPORTED_DIALECTS", "MAX_VIOLATIONS", "JSON_TYPES", "jsonschema",
    "accepts_null", "complete_strict_schema", "strict_violations",
]


def _clip(message: str, limit: int = 300) -> str:
    # jsonschema quotes the offending instance; an oversized argument must not
    # turn one violation into megabytes of error text.
    return message if len(message) <= limit else message[: limit - 1] + "…"
