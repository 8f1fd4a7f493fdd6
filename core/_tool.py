"""Tool definitions: the source of truth for every execution path.

A :class:`ToolDefinition` bundles a stable name, a description the model
reads, a parameter JSON Schema, an async handler, and optional output
schema, title, tags, examples, MCP annotations, provider metadata and a
capability contract. Everything but the handler is the tool's *spec*; its
canonical JSON has a SHA-256 digest that receipts bind to.

Calling ``tool.handler(...)`` directly is possible and bypasses every
guarantee of the executor (validation, policy, scheduling, journaling,
receipts). Execute tools through a :class:`~openfunctions.core.ToolRegistry`.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints, overload

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, create_model, model_validator
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema

from ._canonical import canonical_json, check_json, digest
from ._scheduler import Admission
from ._schema import Validator, complete_strict_schema
from ._tool_tests import ToolTest
from .errors import ConflictKeysInvalid, NonJsonValue, ToolDefinitionError, ToolDocstringInvalid

TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")

#: A non-empty RFC 6901 JSON Pointer: ``/``-separated tokens, ``~`` only as ``~0`` or ``~1``.
_POINTER_RE = re.compile(r"^(/([^~/]|~[01])*)+$")
#: Bounds on one call's conflict keys: how many, and how long each (characters).
MAX_CONFLICT_KEYS = 64
MAX_CONFLICT_KEY_CHARS = 512

Effect = Literal["read", "write", "external"]
Handler = Callable[[dict[str, Any], Any], Awaitable[Any]]


class ToolAnnotations(BaseModel):
    """MCP tool annotations. Hints only: they confer no authority."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    title: str | None = None
    read_only_hint: bool | None = None
    destructive_hint: bool | None = None
    idempotent_hint: bool | None = None
    open_world_hint: bool | None = None

    def to_wire(self) -> dict[str, Any]:
        names = {
            "title": "title",
            "read_only_hint": "readOnlyHint",
            "destructive_hint": "destructiveHint",
            "idempotent_hint": "idempotentHint",
            "open_world_hint": "openWorldHint",
        }
        return {names[k]: v for k, v in self.model_dump().items() if v is not None}


class Capability(BaseModel):
    """What a tool does, declared by its (trusted) author and reviewed by the operator.

    ``effect`` absent means *unclassified*: the scheduler runs the tool
    exclusively. ``parallel_safe`` is a reviewed claim that a read tool may
    share the parallel pool. ``required_scopes`` non-empty means the tool
    requires authority: it runs only when a policy validated the binding.
    ``task_support`` says whether an MCP server may run a call of it as a
    task (the tasks extension): ``forbidden`` (the default: always answered
    synchronously), ``optional`` (long calls become tasks for clients that
    declared the extension), ``required`` (clients that did not declare it
    are refused).

    ``prepare_reconciliation`` / ``reconcile_effect`` (both or neither) bind
    a readback of the tool's effect, for a caller that must settle a call
    whose outcome is unknown without running it again (the work
    controller's ``tool`` steps): ``prepare_reconciliation(params)`` returns
    JSON metadata to save *before* the call runs (e.g. the prior state);
    ``reconcile_effect(params, metadata)`` reads the effect back afterwards
    and returns ``{"status": "applied" | "not_applied" | "partial" |
    "mismatch" | "inconclusive", "observed": {...}, "reason": "..."}``. Either may be a
    plain function (run in a worker thread) or async. They are code, so
    they are not part of the spec (nor its digest).

    Scope of a write's barrier (docs/SERVERS.md, "What runs concurrently
    with what"): ``conflict_keys`` are JSON Pointers (RFC 6901) into the
    params, e.g. ``("/repo",)``; ``conflict_key_fn(params)`` returns more keys
    computed from them (plain code, called on the event loop: quick, no I/O).
    A call's keys are the values at the pointers (a string as is, any other
    value as its canonical JSON, an absent one as ``null``) and the function's
    strings. Keys are plain strings shared across tools: two calls that share
    one, at least one of them a write, never run at once. A classified tool
    with keys needs no registry-wide barrier: writes sharing a key run one at
    a time, in arrival order. ``parallel_safe`` on a read: it shares the read
    pool (holding its keys shared); on a ``write``/``external`` tool: a
    reviewed claim that it needs no barrier at all (the write pool). An
    unclassified tool, or a write with neither keys nor ``parallel_safe``,
    is a registry-wide barrier and runs alone (keys on an unclassified tool
    are refused: they would scope nothing). ``conflict_keys`` is part of the
    spec; ``conflict_key_fn`` is code and is not.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    effect: Effect | None = None
    parallel_safe: bool = False
    idempotent: bool = False
    required_scopes: tuple[str, ...] = ()
    requires_verification: bool = False
    task_support: Literal["forbidden", "optional", "required"] = "forbidden"
    conflict_keys: tuple[str, ...] = ()
    prepare_reconciliation: Callable[..., Any] | None = Field(default=None, exclude=True)
    reconcile_effect: Callable[..., Any] | None = Field(default=None, exclude=True)
    conflict_key_fn: Callable[[dict[str, Any]], Iterable[str]] | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _both_or_neither(self) -> Capability:
        if (self.prepare_reconciliation is None) != (self.reconcile_effect is None):
            raise ValueError("prepare_reconciliation and reconcile_effect are declared together (both or neither)")
        return self

    @model_validator(mode="after")
    def _check_conflict_keys(self) -> Capability:
        # ToolDefinitionError is not a ValueError: pydantic lets it through unwrapped.
        if len(self.conflict_keys) > MAX_CONFLICT_KEYS:
            raise ToolDefinitionError(
                f"conflict_keys lists {len(self.conflict_keys)} pointers; at most {MAX_CONFLICT_KEYS}"
            )
        for p in self.conflict_keys:
            if len(p) > MAX_CONFLICT_KEY_CHARS or not _POINTER_RE.match(p):
                raise ToolDefinitionError(
                    f"conflict_keys: {p[:80]!r} is not a JSON Pointer into the params (RFC 6901: "
                    "'/name', '/outer/inner', '~0' for '~' and '~1' for '/'; at most "
                    f"{MAX_CONFLICT_KEY_CHARS} characters)",
                    details={"pointer": p[:MAX_CONFLICT_KEY_CHARS]},
                )
        fn = self.conflict_key_fn
        if self.effect is None and (self.conflict_keys or fn is not None):
            raise ToolDefinitionError(
                "conflict keys scope the barrier of a classified tool: declare its effect "
                "('read', 'write' or 'external'); an unclassified tool always runs alone"
            )
        if fn is not None and (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)):
            raise ToolDefinitionError("conflict_key_fn must be a plain function (it runs on the admission path), not async")
        return self

    @property
    def keyed(self) -> bool:
        """Whether calls compute conflict keys (from pointers or a function)."""
        return bool(self.conflict_keys) or self.conflict_key_fn is not None

    @property
    def requires_authority(self) -> bool:
        return bool(self.required_scopes)

    @property
    def reconcilable(self) -> bool:
        """Whether the tool binds a readback of its effect (see the class docstring)."""
        return self.reconcile_effect is not None


@dataclass(frozen=True, eq=False)
class ToolDefinition:
    """One tool. Build it with :func:`define_tool` or the :func:`tool` decorator."""

    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Handler
    output_schema: dict[str, Any] | None = None
    title: str | None = None
    tags: tuple[str, ...] = ()
    examples: tuple[dict[str, Any], ...] = ()
    annotations: ToolAnnotations | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    capability: Capability | None = None
    #: Optional parameters for which ``null`` means "absent" (see :func:`define_tool`); not part of the spec.
    null_as_absent: frozenset[str] = field(default=frozenset(), compare=False)
    #: The author's test cases (core/_tool_tests.py); not part of the spec: they check the implementation.
    tests: tuple[ToolTest, ...] = field(default=(), compare=False)

    def drop_absent_nulls(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` without the ``null`` values that stand for "use the default" (strict-mode clients send them)."""
        if not self.null_as_absent or not any(params.get(k, 0) is None for k in self.null_as_absent):
            return params
        return {k: v for k, v in params.items() if not (v is None and k in self.null_as_absent)}

    def spec(self) -> dict[str, Any]:
        """The canonical spec: everything but the handler, JSON only."""
        out: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "tags": list(self.tags),
            "examples": list(self.examples),
            "meta": self.meta,
        }
        if self.title is not None:
            out["title"] = self.title
        if self.output_schema is not None:
            out["outputSchema"] = self.output_schema
        if self.annotations is not None:
            out["annotations"] = self.annotations.to_wire()
        if self.capability is not None:
            cap = self.capability.model_dump(mode="json")
            if cap["task_support"] == "forbidden":  # the default stays out: older specs keep their digest
                del cap["task_support"]
            if not cap["conflict_keys"]:  # likewise
                del cap["conflict_keys"]
            out["capability"] = cap
        return out

    @cached_property
    def spec_json(self) -> str:
        return canonical_json(self.spec())

    @cached_property
    def spec_sha256(self) -> str:
        return digest(self.spec())

    @cached_property
    def input_validator(self) -> Validator:
        return Validator(self.input_schema, what=f"inputSchema of tool {self.name!r}")

    @cached_property
    def output_validator(self) -> Validator | None:
        if self.output_schema is None:
            return None
        return Validator(self.output_schema, what=f"outputSchema of tool {self.name!r}")

    @property
    def schedule_class(self) -> Literal["shared", "exclusive", "keyed", "parallel"]:
        """How calls of this tool are scheduled (docs/SERVERS.md, "What runs concurrently with what").

        ``shared``: a reviewed parallel-safe read. ``keyed``: any other
        classified tool with conflict keys (holds them exclusively).
        ``parallel``: a reviewed parallel-safe write. ``exclusive``: a
        registry-wide barrier (unclassified, or neither keys nor parallel_safe).
        """
        cap = self.capability
        if cap is None or cap.effect is None:
            return "exclusive"
        if cap.parallel_safe and cap.effect == "read":
            return "shared"
        if cap.keyed:
            return "keyed"
        if cap.parallel_safe:
            return "parallel"
        return "exclusive"

    @cached_property
    def _fixed_admission(self) -> Admission | None:
        """The admission of every call of a tool without conflict keys (``None``: computed per call)."""
        cls = self.schedule_class
        if cls == "keyed" or (cls == "shared" and self.capability is not None and self.capability.keyed):
            return None
        return _KEYLESS[cls]

    def admission(self, params: dict[str, Any]) -> Admission:
        """How a call with ``params`` is admitted: its mode and conflict keys.

        Raises :class:`~openfunctions.core.errors.ConflictKeysInvalid` when the
        keys cannot be computed (the function raised or returned junk, a key is
        too long, too many keys). A call whose keys come out empty is admitted
        like the same tool without keys would be: a parallel-safe one in its
        pool, any other as a registry-wide barrier.
        """
        fixed = self._fixed_admission
        if fixed is not None:
            return fixed
        cap = self.capability
        assert cap is not None
        keys = _call_keys(self.name, cap, params)
        shared = cap.effect == "read" and cap.parallel_safe
        if not keys:
            return _KEYLESS["shared" if shared else "parallel" if cap.parallel_safe else "exclusive"]
        return Admission("shared" if shared else "write", keys)


_KEYLESS = {
    "shared": Admission("shared"),
    "parallel": Admission("write"),
    "exclusive": Admission("exclusive"),
}
_ABSENT = object()


def _at_pointer(doc: Any, pointer: str) -> Any:
    for raw in pointer.split("/")[1:]:
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(doc, dict):
            doc = doc.get(token, _ABSENT)
        elif isinstance(doc, list) and token.isdigit() and (token == "0" or token[0] != "0") and int(token) < len(doc):
            doc = doc[int(token)]
        else:
            return _ABSENT
        if doc is _ABSENT:
            return _ABSENT
    return doc


def _refuse_keys(tool: str, reason: str) -> ConflictKeysInvalid:
    return ConflictKeysInvalid(
        f"tool {tool!r}: could not compute the call's conflict keys: {reason}",
        details={"tool": tool, "reason": reason},
    )


def _call_keys(tool: str, cap: Capability, params: dict[str, Any]) -> frozenset[str]:
    keys: set[str] = set()
    for pointer in cap.conflict_keys:
        v = _at_pointer(params, pointer)
        key = v if isinstance(v, str) else "null" if v is _ABSENT else canonical_json(v)
        if len(key) > MAX_CONFLICT_KEY_CHARS:
            raise _refuse_keys(tool, f"the value at {pointer} is longer than {MAX_CONFLICT_KEY_CHARS} characters")
        keys.add(key)
    fn = cap.conflict_key_fn
    if fn is not None:
        try:
            out = fn(params)
        except Exception as exc:
            raise _refuse_keys(tool, f"conflict_key_fn raised {type(exc).__name__}: {str(exc)[:200]}") from None
        if inspect.isawaitable(out):
            close = getattr(out, "close", None)
            if callable(close):
                close()  # never awaited: no "coroutine was never awaited" warning
            raise _refuse_keys(tool, "conflict_key_fn returned an awaitable; it must return the keys")
        if isinstance(out, (str, bytes, Mapping)) or not isinstance(out, Iterable):
            raise _refuse_keys(tool, f"conflict_key_fn returned {type(out).__name__}, not an iterable of strings")
        try:
            for i, k in enumerate(out):
                if i >= MAX_CONFLICT_KEYS:
                    raise _refuse_keys(tool, f"conflict_key_fn returned more than {MAX_CONFLICT_KEYS} keys")
                if not isinstance(k, str):
                    raise _refuse_keys(tool, f"conflict_key_fn returned a {type(k).__name__} key; keys are strings")
                if len(k) > MAX_CONFLICT_KEY_CHARS:
                    raise _refuse_keys(tool, f"conflict_key_fn returned a key longer than {MAX_CONFLICT_KEY_CHARS} characters")
                keys.add(k)
        except ConflictKeysInvalid:
            raise
        except Exception as exc:
            raise _refuse_keys(tool, f"iterating conflict_key_fn's keys raised {type(exc).__name__}") from None
    if len(keys) > MAX_CONFLICT_KEYS:
        raise _refuse_keys(tool, f"{len(keys)} keys; at most {MAX_CONFLICT_KEYS}")
    return frozenset(keys)


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not TOOL_NAME_RE.match(name):
        raise ToolDefinitionError(
            f"tool name {name!r} is invalid: use 1-128 characters of A-Z, a-z, 0-9, '_', '.', '-'"
        )


def _as_schema(schema: Any, what: str) -> dict[str, Any]:
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_json_schema()
    if isinstance(schema, Mapping):
        return dict(schema)
    raise ToolDefinitionError(f"{what} must be a JSON Schema object or a pydantic model class")


def _wrap_sync(fn: Callable[..., Any], blocking: bool = True) -> Handler:
    if not blocking:  # declared quick and non-blocking: no thread hop (see define_tool)
        async def run_inline(params: dict[str, Any], ctx: Any) -> Any:
            return fn(params, ctx)

        run_inline.__wrapped__ = fn  # type: ignore[attr-defined]
        return run_inline

    async def run_in_thread(params: dict[str, Any], ctx: Any) -> Any:
        return await anyio.to_thread.run_sync(fn, params, ctx)

    run_in_thread.__wrapped__ = fn  # type: ignore[attr-defined]
    return run_in_thread


def define_tool(
    *,
    name: str,
    description: str,
    input_schema: Mapping[str, Any] | type[BaseModel] | None = None,
    handler: Callable[[dict[str, Any], Any], Any],
    output_schema: Mapping[str, Any] | type[BaseModel] | None = None,
    title: str | None = None,
    tags: Sequence[str] = (),
    examples: Sequence[Mapping[str, Any]] = (),
    annotations: ToolAnnotations | Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
    capability: Capability | Mapping[str, Any] | None = None,
    blocking: bool = True,
    tests: Sequence[ToolTest | Mapping[str, Any]] = (),
) -> ToolDefinition:
    """Define a tool whose handler takes ``(params: dict, ctx: ToolExecutionContext)``.

    ``tests``: cases ``{"arguments", "expect" | "match" | "check" | "error"}``
    that ``openfunctions-mcp test`` runs through the executor (core/_tool_tests.py);
    not part of the spec or its digest.

    A sync handler runs in a worker thread, so a slow or blocking one never
    stalls the event loop. ``blocking=False`` declares a sync handler quick
    and non-blocking (pure computation on bounded input, no I/O, no locks):
    it is then called on the event loop, which saves the thread hand-over
    (two thread switches, about 0.1-0.5 ms per call on a busy machine). It
    changes only where the handler runs, not what the tool is: it is not part
    of the spec or its digest, and it has no effect on an async handler. Schemas are checked now, so a
    malformed definition fails at import time, not at the first call.

    A closed input schema (``additionalProperties: false`` at its root) is
    completed to the strict form the major providers expect: closed object
    nodes get ``"required": []`` when they list none, and optional top-level
    parameters accept ``null``, which the executor turns into "absent" (the
    handler never sees it). An open schema, or one naming its dialect
    (``$schema``), is kept exactly as given.
    """
    _check_name(name)
    if not isinstance(description, str):
        raise ToolDefinitionError(f"tool {name!r}: description must be a string")
    if not callable(handler):
        raise ToolDefinitionError(f"tool {name!r}: handler must be callable")
    in_schema = _as_schema(input_schema if input_schema is not None else {"type": "object"}, "input_schema")
    if in_schema.get("type", "object") != "object":
        raise ToolDefinitionError(f"tool {name!r}: inputSchema must describe an object (type: object)")
    in_schema.setdefault("type", "object")
    in_schema, null_as_absent = complete_strict_schema(in_schema)
    out_schema = _as_schema(output_schema, "output_schema") if output_schema is not None else None
    if out_schema is not None and out_schema.get("type", "object") != "object":
        raise ToolDefinitionError(f"tool {name!r}: outputSchema must describe an object (MCP structuredContent)")
    if isinstance(annotations, Mapping):
        annotations = ToolAnnotations.model_validate(dict(annotations))
    if isinstance(capability, Mapping):
        capability = Capability.model_validate(dict(capability))
    fn: Handler = handler if inspect.iscoroutinefunction(handler) else _wrap_sync(handler, blocking)
    t = ToolDefinition(
        name=name,
        description=description,
        input_schema=in_schema,
        handler=fn,
        output_schema=out_schema,
        title=title,
        tags=tuple(tags),
        examples=tuple(dict(e) for e in examples),
        annotations=annotations,
        meta=dict(meta or {}),
        capability=capability,
        null_as_absent=null_as_absent,
        tests=tuple(ToolTest.of(c, name) for c in tests),
    )
    try:
        check_json(t.spec())
    except NonJsonValue as exc:
        raise ToolDefinitionError(f"tool {name!r}: spec is not JSON: {exc.message}") from None
    _ = t.input_validator, t.output_validator  # compile now: a bad schema fails at definition time
    return t


_CTX_NAMES = {"ctx", "context"}

#: A Google-style docstring section header that lists the parameters.
_ARGS_HEADER = re.compile(r"^(\s*)(Args|Arguments|Parameters):\s*$")
#: One entry of that section: ``name: text`` or ``name (type): text``.
_ARG_ENTRY = re.compile(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
#: A line that keeps its own line in a description (a list item, a section header like ``Returns:``).
_OWN_LINE = re.compile(r"^\s*(([-*+]|\d+[.)])\s|[A-Z]\w*( \w+)?:$)")


class _NoFieldTitles(GenerateJsonSchema):
    """Pydantic's schema without the titles it derives from parameter names ("Text" for ``text``): noise
    the model reads on every call. A title the author wrote (``Field(title=...)``) stays."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False


def _parse_docstring(doc: str, tool_name: str) -> tuple[str, dict[str, str]]:
    """Split a cleaned docstring into the tool's description and the parameter descriptions of its ``Args:``.

    The ``Args:`` (or ``Arguments:``/``Parameters:``) section is taken out of
    the description; the other sections (``Returns:``...) stay. Hard line
    wraps inside a paragraph are joined with a space (they are source
    formatting); blank lines, list items and indented lines keep their breaks.
    """
    lines = doc.splitlines()
    kept: list[str] = []
    params: dict[str, str] = {}
    i = 0
    while i < len(lines):
        m = _ARGS_HEADER.match(lines[i])
        if m is None:
            kept.append(lines[i])
            i += 1
            continue
        base = len(m.group(1))
        i += 1
        entry_indent: int | None = None
        current: str | None = None
        while i < len(lines):
            line = lines[i]
            indent = len(line) - len(line.lstrip())
            if line.strip() and indent <= base:
                break  # the next section (or text) at the header's level
            i += 1
            if not line.strip():
                continue
            if entry_indent is None:
                entry_indent = indent
            if indent > entry_indent and current is not None:
                params[current] = f"{params[current]} {line.strip()}".strip()
                continue
            e = _ARG_ENTRY.match(line.strip())
            if indent != entry_indent or e is None:
                raise ToolDocstringInvalid(
                    f"tool {tool_name!r}: the docstring's Args section has a line that is not "
                    f"'name: description': {line.strip()[:80]!r}",
                    details={"tool": tool_name, "line": line.strip()[:200]},
                )
            current = e.group(1)
            if current in params:
                raise ToolDocstringInvalid(
                    f"tool {tool_name!r}: the docstring's Args section describes {current!r} twice",
                    details={"tool": tool_name, "parameter": current},
                )
            params[current] = e.group(2).strip()
    return _join_wraps(kept), params


def _join_wraps(lines: list[str]) -> str:
    out: list[str] = []
    for line in lines:
        joinable = (
            out and out[-1].strip() and line.strip() and not line.startswith((" ", "\t"))
            and not out[-1].startswith((" ", "\t")) and not _OWN_LINE.match(line)
            and not out[-1].rstrip().endswith(":")
        )
        if joinable:
            out[-1] = f"{out[-1].rstrip()} {line.strip()}"
        else:
            out.append(line.rstrip())
    return "\n".join(out).strip()


def _finish_property(prop: dict[str, Any], *, default_none: bool, doc: str | None) -> dict[str, Any]:
    """One generated parameter schema, made to read like a hand-written one.

    ``x: T | None = None`` comes out of pydantic as ``anyOf: [T, null]`` with
    ``default: null``; it is written as plain ``T``: :func:`define_tool` makes
    every optional parameter accept ``null`` as "absent" anyway, and absent
    means ``None`` here, so the same arguments pass. The docstring's
    description fills in where ``Field(description=...)`` gave none.
    """
    branches = prop.get("anyOf")
    if default_none and isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches:
        inner = next(b for b in branches if b != {"type": "null"})
        rest = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
        prop = {**inner, **rest}
    if doc and "description" not in prop:
        prop = {**prop, "description": doc}
    return prop


def _plain_json(ann: Any) -> bool:
    """Whether a validated JSON value of this type needs no conversion by pydantic: strings, booleans, string
    literals, ``None`` and unions of them, with constraints only from ``Field`` (which the schema carries)."""
    origin = get_origin(ann)
    if origin is Annotated:
        base, *metadata = get_args(ann)
        return all(type(m) is FieldInfo for m in metadata) and _plain_json(base)
    if ann in (str, bool, type(None)):
        return True
    if origin is Literal:
        return all(isinstance(a, str) or a is None for a in get_args(ann))
    if origin in (Union, UnionType):
        return all(_plain_json(a) for a in get_args(ann))
    return False


_OutputSchema = Mapping[str, Any] | type[BaseModel] | None | Literal["auto"]


@overload
def tool(
    name: Callable[..., Any], *, description: str | None = None, output_schema: _OutputSchema = "auto", **kwargs: Any
) -> ToolDefinition: ...


@overload
def tool(
    name: str | None = None, *, description: str | None = None, output_schema: _OutputSchema = "auto", **kwargs: Any
) -> Callable[[Callable[..., Any]], ToolDefinition]: ...


def tool(
    name: str | Callable[..., Any] | None = None,
    *,
    description: str | None = None,
    output_schema: _OutputSchema = "auto",
    **kwargs: Any,
) -> ToolDefinition | Callable[[Callable[..., Any]], ToolDefinition]:
    """Decorator: derive a tool from a function's signature, type hints and docstring.

    All three spellings work: ``@tool``, ``@tool()``/``@tool("name", ...)``,
    and ``tool(fn)`` (which returns the :class:`ToolDefinition` at once).

    Parameters become the input schema (via pydantic), closed to unknown
    fields. Constraints and descriptions come from ``Annotated[T,
    Field(description=..., ge=..., max_length=..., pattern=...)]`` or, for
    descriptions, from the docstring's Google-style ``Args:`` section (an
    entry for a parameter the function does not have is a
    :class:`~openfunctions.core.errors.ToolDocstringInvalid`). ``x: T | None = None`` is served as an
    optional ``T``. A parameter named ``ctx``/``context`` or annotated
    ``ToolExecutionContext`` receives the trusted context.

    The docstring without its ``Args:`` section is the description (unless
    ``description=`` is given). The return annotation becomes the output
    schema: an object type is used as is, anything else is wrapped as
    ``{"result": ...}`` (the MCP SDK's convention); ``output_schema=`` gives
    one explicitly, ``output_schema=None`` none. Every other keyword
    (``title``, ``tags``, ``examples``, ``annotations``, ``meta``,
    ``capability``, ``tests``, ``blocking``) means what it means to
    :func:`define_tool`.
    """
    blocking = kwargs.pop("blocking", True)

    if name is not None and not callable(name) and not isinstance(name, str):
        raise ToolDefinitionError(f"tool(): the name must be a string, got {describe_object(name)}")
    tool_name = name if isinstance(name, str) else None

    def decorate(fn: Callable[..., Any]) -> ToolDefinition:
        from ._context import ToolExecutionContext

        if not callable(fn):
            raise ToolDefinitionError(f"@tool decorates a function, got {describe_object(fn)}")

        final_name = tool_name or fn.__name__
        summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "", final_name)
        sig = inspect.signature(fn)
        unknown = sorted(set(arg_docs) - set(sig.parameters))
        if unknown:
            raise ToolDocstringInvalid(
                f"tool {final_name!r}: the docstring's Args section describes {', '.join(map(repr, unknown))}, "
                f"which {'is not a parameter' if len(unknown) == 1 else 'are not parameters'} of "
                f"{getattr(fn, '__qualname__', final_name)} (its parameters: {', '.join(sig.parameters) or 'none'})",
                details={"tool": final_name, "parameter": unknown[0], "unknown": unknown},
            )
        hints = get_type_hints(fn, include_extras=True)
        fields: dict[str, Any] = {}
        ctx_param: str | None = None
        for pname, p in sig.parameters.items():
            ann = hints.get(pname, Any)
            if pname in _CTX_NAMES or ann is ToolExecutionContext:
                ctx_param = pname
                continue
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ToolDefinitionError(f"tool {fn.__name__!r}: *args/**kwargs cannot be described by a schema")
            default = ... if p.default is p.empty else p.default
            fields[pname] = (ann, Field(default))
        model = create_model(f"{fn.__name__}_params", __config__=ConfigDict(extra="forbid"), **fields)
        # The executor validated the params against this very schema; when every parameter is a string, a
        # boolean or a string literal, that is all pydantic would check, so the call skips it (a few
        # microseconds on the hot path). Other types (int takes 1.0, models) still go through pydantic.
        plain = all(_plain_json(ann) for ann, _ in fields.values())
        defaults = {k: sig.parameters[k].default for k in fields if sig.parameters[k].default is not inspect.Parameter.empty}
        in_schema = model.model_json_schema(schema_generator=_NoFieldTitles)
        in_schema.pop("title", None)
        props = in_schema.get("properties") or {}
        for pname in props:
            props[pname] = _finish_property(
                props[pname], default_none=sig.parameters[pname].default is None, doc=arg_docs.get(pname))

        ret = hints.get("return", inspect.Signature.empty)
        wrap_result = False
        out: Any = None
        adapter: TypeAdapter[Any] | None = None
        if output_schema == "auto":
            if ret not in (inspect.Signature.empty, Any, None, type(None)):
                adapter = TypeAdapter(ret)
                schema = adapter.json_schema()
                if schema.get("type") == "object":
                    out = schema
                else:
                    wrap_result = True
                    out = {"type": "object", "properties": {"result": schema}, "required": ["result"]}
        else:
            out = output_schema
        is_async = inspect.iscoroutinefunction(fn)

        async def handler(params: dict[str, Any], ctx: Any) -> Any:
            if plain:
                call_kwargs = {**defaults, **params}
            else:
                parsed = model.model_validate(params)
                call_kwargs = {k: getattr(parsed, k) for k in fields}
            if ctx_param is not None:
                call_kwargs[ctx_param] = ctx
            if is_async:
                value = await fn(**call_kwargs)
            elif not blocking:
                value = fn(**call_kwargs)
            else:
                value = await anyio.to_thread.run_sync(lambda: fn(**call_kwargs))
            if adapter is not None:
                value = adapter.dump_python(value, mode="json")
            return {"result": value} if wrap_result else value

        handler.__wrapped__ = fn  # type: ignore[attr-defined]
        return define_tool(
            name=final_name,
            description=description if description is not None else summary,
            input_schema=in_schema,
            handler=handler,
            output_schema=out,
            **kwargs,
        )

    if callable(name):  # bare ``@tool`` or ``tool(fn)``: the function came in place of the name
        return decorate(name)
    return decorate


def describe_object(obj: Any) -> str:
    """How an error names an object a caller passed: its kind and, where it has one, its qualified name."""
    kind = type(obj).__name__
    qual = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    module = getattr(obj, "__module__", None)
    if isinstance(qual, str):
        where = f"{module}.{qual}" if isinstance(module, str) and module not in ("builtins", "__main__") else qual
        return f"{kind} {where!r}"
    text = repr(obj)
    return f"{kind} {text if len(text) <= 80 else text[:77] + '...'}"


__all__ = [
    "ToolDefinition", "ToolAnnotations", "Capability", "Effect", "define_tool", "tool", "TOOL_NAME_RE",
    "MAX_CONFLICT_KEYS", "MAX_CONFLICT_KEY_CHARS",
]
