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

Schemas are data, never a way to reach anything:

- ``$ref`` resolves only inside the schema (and the dialects' own meta-schemas):
  every validator is built on a registry whose retrieval refuses everything, so
  no ``http://`` or ``file://`` reference is ever fetched; a ``$ref`` that does
  not resolve is refused when the validator is built (``ToolDefinitionError``).
- ``pattern``, ``patternProperties`` (and ``additionalProperties`` next to it)
  run on RE2, a linear-time engine, so no instance can make a pattern
  backtrack for seconds. RE2 reads ECMA-262's common subset (the one JSON
  Schema recommends); a pattern outside it (lookaround, backreferences) falls
  back to Python's ``re`` in a schema we wrote, and is refused in an untrusted one.
- ``uniqueItems`` is checked in linear time (hashing), not jsonschema's
  pairwise fallback.
- An instance nested too deeply to walk is a violation, not a ``RecursionError``.

An *untrusted* schema (an upstream MCP server's: build it with
``Validator(..., untrusted=True)`` or inside :func:`untrusted_schemas`) is held
to more: at most :data:`MAX_UNTRUSTED_SCHEMA_BYTES` of JSON and
:data:`MAX_UNTRUSTED_SCHEMA_DEPTH` levels; every pattern must compile in RE2;
``unevaluatedProperties`` may not meet ``patternProperties`` (jsonschema
evaluates that pair with Python's ``re``); and one validation may take at
most :data:`UNTRUSTED_VALIDATION_S` seconds (a schema whose ``$ref`` s fan out
exponentially is stopped there, with a violation saying so).
:meth:`Validator.prevalidate` runs a validation in a worker thread with a
longer bound and remembers a passing instance, so the executor's check of the
same object on the event loop is free.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import functools
import json
import operator
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import re2
import referencing
import referencing.exceptions
import referencing.jsonschema
from jsonschema import Draft7Validator, Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema_specifications import REGISTRY as _SPECIFICATIONS

from .errors import InvalidOutput, InvalidParams, ToolDefinitionError

DEFAULT_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SUPPORTED_DIALECTS = {
    "https://json-schema.org/draft/2020-12/schema": Draft202012Validator,
    "http://json-schema.org/draft-07/schema#": Draft7Validator,
    "http://json-schema.org/draft-07/schema": Draft7Validator,
}
MAX_VIOLATIONS = 20
#: Bounds on a schema we did not write (see the module docstring).
MAX_UNTRUSTED_SCHEMA_BYTES = 256 * 1024
MAX_UNTRUSTED_SCHEMA_DEPTH = 128  # JSON nesting: each schema level is two (a schema, its "properties")
#: Seconds one validation against an untrusted schema may take on the event loop,
#: and in :meth:`Validator.prevalidate`'s worker thread.
UNTRUSTED_VALIDATION_S = 1.0
PREVALIDATION_S = 10.0

_UNTRUSTED: contextvars.ContextVar[bool] = contextvars.ContextVar("openfunctions_untrusted_schemas", default=False)


@contextlib.contextmanager
def untrusted_schemas() -> Iterator[None]:
    """Every :class:`Validator` built inside this block (in this task or thread) treats its schema as untrusted."""
    token = _UNTRUSTED.set(True)
    try:
        yield
    finally:
        _UNTRUSTED.reset(token)


# -- references: inside the schema only -------------------------------------------


def _refuse_retrieval(uri: str) -> Any:
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]  # an attrs class mypy reads without its fields


#: The dialects' meta-schemas, and nothing else: a reference to any other URI is unresolvable, never fetched.
NO_RETRIEVAL: referencing.Registry[Any] = _SPECIFICATIONS.combine(
    referencing.Registry(retrieve=_refuse_retrieval),  # type: ignore[call-arg]  # (attrs, as above)
)

_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})


def _check_refs(schema: dict[str, Any], dialect: str, what: str) -> int:
    """Refuse a ``$ref`` that does not resolve inside ``schema``; return the schema's nesting depth."""
    spec = referencing.jsonschema.specification_with(dialect)
    resolver = NO_RETRIEVAL.resolver_with_root(spec.create_resource(schema))
    deepest = 0

    def walk(node: Any, resolver: Any, depth: int) -> None:
        nonlocal deepest
        deepest = max(deepest, depth)
        if isinstance(node, list):
            for item in node:
                walk(item, resolver, depth + 1)
            return
        if not isinstance(node, dict):
            return
        if depth and isinstance(node.get("$id"), str):
            resolver = resolver.in_subresource(spec.create_resource(node))
        for key in ("$ref", "$dynamicRef"):
            ref = node.get(key)
            if isinstance(ref, str):
                try:
                    resolver.lookup(ref)
                except referencing.exceptions.Unresolvable:
                    raise ToolDefinitionError(
                        f"{what} has a {key} {ref[:200]!r} that does not resolve inside the schema "
                        "(references to other documents, http:// or file://, are never fetched)"
                    ) from None
        for key, value in node.items():
            if key not in _DATA_KEYWORDS:
                walk(value, resolver, depth + 1)

    walk(schema, resolver, 0)
    return deepest


# -- patterns: RE2 -------------------------------------------------------------------

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is our error to report, not a line on stderr
_RE2_OPTIONS.never_capture = True
_UNANCHORED = re2._re2.RE2.Anchor.UNANCHORED


@functools.lru_cache(maxsize=4096)
def _re2_search(pattern: str) -> Callable[[str], bool] | None:
    """A linear-time ``search`` for ``pattern`` (True on a match anywhere), or None when RE2 cannot read it."""
    try:
        compiled = re2._re2.RE2(pattern.encode("utf-8", "surrogatepass"), _RE2_OPTIONS)
    except Exception:
        return None
    if not compiled.ok():
        return None
    match = compiled.Match

    def search(text: str) -> bool:
        data = text.encode("utf-8", "surrogatepass")
        return bool(match(_UNANCHORED, data, 0, len(data))[0][0] != -1)

    return search


@functools.lru_cache(maxsize=1024)
def _re_search(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern)
    return lambda text: compiled.search(text) is not None


def pattern_search(pattern: str, *, untrusted: bool = False) -> Callable[[str], bool]:
    """``search`` for a schema pattern: RE2 when it reads the pattern; else Python's ``re``, for a trusted schema only.

    Raises ``ToolDefinitionError`` for an untrusted pattern RE2 cannot read, ``re.error`` for one neither can.
    """
    found = _re2_search(pattern)
    if found is not None:
        return found
    if untrusted:
        raise ToolDefinitionError(
            f"pattern {pattern[:200]!r} is outside the linear-time regular expressions this server runs for "
            "schemas it did not write (no lookaround or backreferences)"
        )
    return _re_search(pattern)


def _patterns(schema: Any) -> Iterator[str]:
    """Every ``pattern`` and ``patternProperties`` key in ``schema`` (data keywords skipped)."""
    if isinstance(schema, list):
        for item in schema:
            yield from _patterns(item)
    elif isinstance(schema, dict):
        if isinstance(schema.get("pattern"), str):
            yield schema["pattern"]
        if isinstance(schema.get("patternProperties"), dict):
            yield from schema["patternProperties"]
        for key, value in schema.items():
            if key not in _DATA_KEYWORDS:
                yield from _patterns(value)


def _uses(schema: Any, keyword: str) -> bool:
    if isinstance(schema, list):
        return any(_uses(v, keyword) for v in schema)
    if isinstance(schema, dict):
        return keyword in schema or any(_uses(v, keyword) for k, v in schema.items() if k not in _DATA_KEYWORDS)
    return False


# -- jsonschema keywords replaced: patterns on RE2, uniqueItems in linear time ---------


def _kw_pattern(validator: Any, patrn: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not pattern_search(patrn)(instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _kw_pattern_properties(validator: Any, pattern_properties: dict[str, Any], instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for patrn, subschema in pattern_properties.items():
        search = pattern_search(patrn)
        for k, v in instance.items():
            if search(k):
                yield from validator.descend(v, subschema, path=k, schema_path=patrn)


def _additional(instance: dict[str, Any], schema: dict[str, Any]) -> Iterator[str]:
    properties = schema.get("properties", {})
    searches = [pattern_search(p) for p in schema.get("patternProperties", {})]
    for name in instance:
        if name not in properties and not any(search(name) for search in searches):
            yield name


def _kw_additional_properties(validator: Any, ap: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    # jsonschema's own, with the patternProperties match on RE2.
    if not validator.is_type(instance, "object"):
        return
    extras = set(_additional(instance, schema))
    if validator.is_type(ap, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], ap, path=extra)
    elif not ap and extras:
        # jsonschema's wording, the names written as JSON (and cut short) as in every other message.
        names = sorted(extras, key=str)
        shown = ", ".join(_quoted(each, 80) for each in names[:MAX_VIOLATIONS])
        if len(names) > MAX_VIOLATIONS:
            shown += f" and {len(names) - MAX_VIOLATIONS} more"
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            patterns = ", ".join(_quoted(each, 80) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{shown} {verb} not match any of the regexes: {patterns}")
        else:
            yield ValidationError(f"Additional properties are not allowed ({shown} {'was' if len(names) == 1 else 'were'} unexpected)")


def _unique_key(value: Any) -> Any:
    """A hashable key equal for JSON values jsonschema deems equal (1 == 1.0, but true != 1; key order ignored)."""
    if value is True or value is False:
        return ("b", value)
    if isinstance(value, (int, float)):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, list):
        return ("l", tuple(_unique_key(v) for v in value))
    if isinstance(value, dict):
        return ("d", frozenset((k, _unique_key(v)) for k, v in value.items()))
    return ("o", repr(value))


def _kw_unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if unique and validator.is_type(instance, "array"):
        seen = set()
        for item in instance:
            key = _unique_key(item)
            if key in seen:
                yield ValidationError(f"{instance!r} has non-unique elements")
                return
            seen.add(key)


_OWN_KEYWORDS = {
    "pattern": _kw_pattern, "patternProperties": _kw_pattern_properties,
    "additionalProperties": _kw_additional_properties, "uniqueItems": _kw_unique_items,
}


class _OverBudget(Exception):
    pass


#: Keyword evaluations between two reads of the clock (each is linear in its piece of the value).
_CLOCK_EVERY = 128
#: (deadline, steps until the next clock read) of the validation running in this task or thread.
_DEADLINE: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("openfunctions_validation_deadline", default=None)


def _bounded(keyword: Callable[..., Any]) -> Callable[..., Any]:
    def run(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        budget = _DEADLINE.get()
        if budget is not None:
            budget[1] -= 1
            if budget[1] <= 0:
                budget[1] = _CLOCK_EVERY
                if time.monotonic() > budget[0]:
                    raise _OverBudget
        return keyword(validator, value, instance, schema)

    return run


def _classes(base: Any, untrusted: bool) -> Any:
    keywords = {**base.VALIDATORS, **_OWN_KEYWORDS}
    if untrusted:
        keywords = {k: _bounded(fn) for k, fn in keywords.items()}
    return validators.extend(base, keywords)


_CLASSES = {(base, untrusted): _classes(base, untrusted)
            for base in (Draft7Validator, Draft202012Validator) for untrusted in (False, True)}


def _json_path(parts: Any) -> str:
    out = "$"
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else f".{p}"
    return out


class Validator:
    """A compiled validator for one schema, in the dialect its ``$schema`` selects.

    ``untrusted`` (default: inside :func:`untrusted_schemas`) holds a schema we
    did not write to the bounds in the module docstring.
    """

    __slots__ = ("schema", "dialect", "untrusted", "_v", "_trivial", "_accepts", "_passed", "_lock")

    def __init__(self, schema: dict[str, Any], *, what: str = "schema", untrusted: bool | None = None) -> None:
        if not isinstance(schema, dict):
            raise ToolDefinitionError(f"{what} must be a JSON object, got {type(schema).__name__}")
        untrusted = _UNTRUSTED.get() if untrusted is None else untrusted
        dialect = schema.get("$schema", DEFAULT_DIALECT)
        base = SUPPORTED_DIALECTS.get(dialect) if isinstance(dialect, str) else None
        if base is None:
            raise ToolDefinitionError(
                f"{what} selects unsupported JSON Schema dialect {str(dialect)[:200]!r}; "
                f"supported: {sorted(set(SUPPORTED_DIALECTS))}"
            )
        try:
            if untrusted:
                size = len(json.dumps(schema, ensure_ascii=False, separators=(",", ":"), default=str))
                if size > MAX_UNTRUSTED_SCHEMA_BYTES:
                    raise ToolDefinitionError(f"{what} is {size:,} bytes of JSON, over the limit of {MAX_UNTRUSTED_SCHEMA_BYTES:,}")
            depth = _check_refs(schema, dialect, what)
            if untrusted and depth > MAX_UNTRUSTED_SCHEMA_DEPTH:
                raise ToolDefinitionError(f"{what} nests {depth} levels deep, over the limit of {MAX_UNTRUSTED_SCHEMA_DEPTH}")
            base.check_schema(schema)
        except SchemaError as exc:
            raise ToolDefinitionError(f"{what} is not a valid {dialect} schema: {_clip(exc.message)}") from None
        except RecursionError:
            raise ToolDefinitionError(f"{what} is nested too deeply to check") from None
        if untrusted:
            for patrn in _patterns(schema):
                try:
                    pattern_search(patrn, untrusted=True)
                except ToolDefinitionError as exc:
                    raise ToolDefinitionError(f"{what}: {exc.message}") from None
            if _uses(schema, "unevaluatedProperties") and _uses(schema, "patternProperties"):
                raise ToolDefinitionError(
                    f"{what} combines unevaluatedProperties with patternProperties, which this server does not "
                    "evaluate for schemas it did not write (it would match the patterns with a backtracking engine)"
                )
        self.schema = schema
        self.dialect = dialect
        self.untrusted = untrusted
        self._v = _CLASSES[base, untrusted](schema, registry=NO_RETRIEVAL, format_checker=base.FORMAT_CHECKER)
        # `{"type": "object"}` with nothing else is common and needs no walk.
        self._trivial = schema in ({"type": "object"}, {})
        #: A predicate that accepts only valid instances (see the module docstring), or None.
        self._accepts = compile_fast_check(schema, untrusted=untrusted)
        #: id -> instance that passed :meth:`prevalidate` and has not been checked since (strong refs, few).
        self._passed: dict[int, Any] = {}
        self._lock = threading.Lock()

    def violations(self, instance: Any) -> list[dict[str, str]]:
        if self._trivial and (not self.schema or isinstance(instance, dict)):
            return []
        if self._passed and self._take_passed(instance):
            return []
        accepts = self._accepts
        if accepts is not None:
            try:
                if accepts(instance):
                    return []
            except RecursionError:
                pass  # jsonschema below reports it as a violation
        return self._walk(instance, UNTRUSTED_VALIDATION_S)

    def _walk(self, instance: Any, bound_s: float) -> list[dict[str, str]]:
        token = _DEADLINE.set([time.monotonic() + bound_s, _CLOCK_EVERY]) if self.untrusted else None
        try:
            errors = sorted(self._v.iter_errors(instance), key=lambda e: (list(map(str, e.absolute_path)), e.message))
        except _OverBudget:
            return [{"path": "$", "message": f"validation stopped after {bound_s:g} s: the schema is too costly "
                                             "to evaluate for this value"}]
        except RecursionError:
            return [{"path": "$", "message": "the value is nested too deeply to validate, or the schema refers to "
                                             "itself without end"}]
        except referencing.exceptions.Unresolvable as exc:
            return [{"path": "$", "message": _clip(f"the schema has a reference that does not resolve: {exc}")}]
        finally:
            if token is not None:
                _DEADLINE.reset(token)
        return [{"path": _json_path(e.absolute_path), "message": _clip(_json_message(e))} for e in errors]

    def prevalidate(self, instance: Any) -> bool:
        """Validate ``instance`` (in a worker thread) under :data:`PREVALIDATION_S`; remember it if it passes.

        The next :meth:`violations` of the *same object* answers at once, so the
        event loop's own check of a large value costs nothing. Returns whether it passed.
        """
        accepts = self._accepts
        try:
            ok = accepts is not None and accepts(instance)
        except RecursionError:
            ok = False
        if not ok and self._walk(instance, PREVALIDATION_S):
            return False
        with self._lock:
            if len(self._passed) >= 64:  # never validated on the loop after all (its call failed): forget the oldest
                self._passed.pop(next(iter(self._passed)))
            self._passed[id(instance)] = instance
        return True

    def _take_passed(self, instance: Any) -> bool:
        with self._lock:
            found = self._passed.get(id(instance))
            if found is instance:
                del self._passed[id(instance)]
                return True
        return False

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


def compile_fast_check(schema: Any, *, untrusted: bool = False) -> Check | None:
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
    if not _string_checks(schema, checks, untrusted) or not _number_checks(schema, checks):
        return None
    if not _object_checks(schema, checks, untrusted) or not _array_checks(schema, checks, untrusted):
        return None
    if "anyOf" in schema:
        subs = schema["anyOf"]
        if not isinstance(subs, list) or not subs:
            return None
        compiled = [compile_fast_check(s, untrusted=untrusted) for s in subs]
        if any(c is None for c in compiled):
            return None
        branches = tuple(c for c in compiled if c is not None)
        checks.append(lambda x: any(c(x) for c in branches))
    return _all(checks)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _string_checks(schema: dict[str, Any], checks: list[Check], untrusted: bool) -> bool:
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
            search = pattern_search(pattern, untrusted=untrusted)
        except (re.error, ToolDefinitionError):
            return False
        checks.append(lambda x: not isinstance(x, str) or search(x))
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


def _object_checks(schema: dict[str, Any], checks: list[Check], untrusted: bool) -> bool:
    props = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(props, dict) or not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return False
    compiled: dict[str, Check] = {}
    for name, sub in props.items():
        c = compile_fast_check(sub, untrusted=untrusted)
        if c is None:
            return False
        compiled[name] = c
    closed = extra is False
    extra_check = None if extra is True or closed else compile_fast_check(extra, untrusted=untrusted)
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


def _array_checks(schema: dict[str, Any], checks: list[Check], untrusted: bool) -> bool:
    lo, hi = schema.get("minItems"), schema.get("maxItems")
    if (lo is not None and not _count(lo)) or (hi is not None and not _count(hi)):
        return False
    if lo is not None or hi is not None:
        lo_, hi_ = lo or 0, hi
        checks.append(lambda x: not isinstance(x, list) or (len(x) >= lo_ and (hi_ is None or len(x) <= hi_)))
    if "items" in schema:
        item = compile_fast_check(schema["items"], untrusted=untrusted)  # a list (draft-07 tuple form) or false: no fast path
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


def _quoted(value: Any, limit: int = 120) -> str:
    """The value as JSON, cut short: a long value must not push what is wrong with it out of a clipped message."""
    text = _as_json(value)
    return text if len(text) <= limit else f"{text[:limit - 1]}… ({len(text):,} characters)"


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
    if error.validator == "additionalProperties":
        return message  # written as JSON already (_kw_additional_properties)
    if error.validator == "type":
        types = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return f"{_quoted(error.instance)} is not of type {' or '.join(_as_json(t) for t in types)}"
    head = repr(error.instance)
    if message.startswith(head):
        message = _quoted(error.instance) + message[len(head):]
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
    "MAX_UNTRUSTED_SCHEMA_BYTES", "MAX_UNTRUSTED_SCHEMA_DEPTH", "NO_RETRIEVAL", "PREVALIDATION_S", "UNTRUSTED_VALIDATION_S",
    "pattern_search", "untrusted_schemas",
    "accepts_null", "complete_strict_schema", "strict_violations",
]


def _clip(message: str, limit: int = 300) -> str:
    # jsonschema quotes the offending instance; an oversized argument must not
    # turn one violation into megabytes of error text.
    return message if len(message) <= limit else message[: limit - 1] + "…"
