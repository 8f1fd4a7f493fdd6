"""The operator's step catalog: a trusted TOML file naming a workspace and its steps.

An agent never names a command or a tool: it picks a *step* from this catalog
and fills only the parameters the step declares. Every step is bound to one
registry tool (``of_step.<name>``, built by :mod:`openfunctions.work._steps`;
a ``tool`` step runs the registered tool it names).

File format (version 1; see ``work/example_catalog.toml`` and
``docs/work/catalog.md``)::

    version = 1                      # required, must be 1
    workspace = "."                  # required; relative to the catalog file's directory

    [steps.<name>]                   # name: ^[a-z][a-z0-9_-]{0,63}$
    kind = "command" | "write_file" | "read_file" | "fingerprint" | "tool"   # required
    description = "..."              # required, shown to the agent
    effect = "read" | "write" | "external"   # command and tool only (default "external");
                                     # write_file is "write", read kinds are "read"
    idempotent = true|false          # default: false for command and tool, true otherwise
    verifier = true|false            # command only: a trusted verification binding
    timeout_s = 300                  # command only (1..86400, default 300)

    # command
    argv = ["python", "-m", "pytest", "{target}"]  # an element that is exactly "{slot}"
                                     # is filled by ONE parameter value; any other
                                     # brace must be doubled ("{{" / "}}") = literal
    cwd = "."                        # relative to workspace, must resolve inside it
    env = ["PATH", "HOME"]           # names passed through from the server's environment
    env_set = { PYTHONDONTWRITEBYTECODE = "1" }   # fixed values
    readback = { paths = ["out/**"], changes_on_apply = false }   # optional oracle (see steps.py)
    [steps.<name>.params.<slot>]     # one table per slot; every slot must be declared
    type = "string" | "integer"
    description = "..."
    pattern = "tests/[A-Za-z0-9_/.-]+"   # strings: required unless enum; matched against
                                     # the WHOLE value (anchored for you)
    enum = ["a", "b"]
    max_length = 256                 # strings, default 256 (max 4096)
    minimum / maximum                # integers
    default = ...                    # absent = required

    # tool: a registered tool run as the step (its receipt is the step's)
    tool = "deploy_release"          # a tool in the registry the work tools are built into
    reconcile = true|false           # default false; true: the tool's capability must bind
                                     # prepare_reconciliation/reconcile_effect, which become
                                     # the step's readback oracle (of_oracle.<name>)
    [steps.<name>.params.<slot>]     # as for command; the slots ARE the tool's parameters

    # write_file / read_file / fingerprint
    paths = ["src/**"]               # glob patterns relative to the workspace (required)
    max_bytes = 1048576              # write_file/read_file size limit (default 1 MiB)

The catalog ``digest`` is ``sha256:<hex>`` of the canonical JSON of
``{"catalog": <the parsed TOML>, "workspace": <resolved workspace path>}``:
any edit of the file's meaning, or moving the workspace, changes it; comments
and formatting do not. Attempts and grants bind to it.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from openfunctions.core import Validator
from openfunctions.core import digest as _digest
from openfunctions.core.errors import NonJsonValue

from ._errors import CatalogInvalid, PlanInvalid, UnknownStep
from ._paths import check_pattern

CATALOG_VERSION = 1
STEP_TOOL_PREFIX = "of_step."
ORACLE_TOOL_PREFIX = "of_oracle."
STEP_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
SLOT_NAME_RE = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
_SLOT_RE = re.compile(r"^\{([a-z_][a-z0-9_]{0,63})\}$")
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_TIMEOUT_S = 86400.0
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_MAX_BYTES = 1024 * 1024
MAX_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_STRING_MAX = 256
MAX_STRING_MAX = 4096

Kind = Literal["command", "write_file", "read_file", "fingerprint", "tool"]
Effect = Literal["read", "write", "external"]
KINDS = ("command", "write_file", "read_file", "fingerprint", "tool")
EFFECTS = ("read", "write", "external")


@dataclass(frozen=True)
class ParamSpec:
    """One declared parameter slot of a ``command`` step."""

    name: str
    type: Literal["string", "integer"]
    description: str = ""
    pattern: str | None = None
    enum: tuple[Any, ...] | None = None
    max_length: int = DEFAULT_STRING_MAX
    minimum: int | None = None
    maximum: int | None = None
    default: Any = None
    required: bool = True

    def schema(self) -> dict[str, Any]:
        s: dict[str, Any] = {"type": self.type}
        if self.description:
            s["description"] = self.description
        if self.type == "string":
            s["maxLength"] = self.max_length
            s["minLength"] = 1
            if self.pattern is not None:
                # JSON Schema patterns are unanchored searches: anchor them so
                # the operator's pattern constrains the whole value. Not with
                # "$": in Python's re it also matches before a final newline,
                # so "hello\n" would pass [a-z]+; "(?![\s\S])" means the end
                # of the string in both ECMA-262 and Python.
                s["pattern"] = f"^(?:{self.pattern})(?![\\s\\S])"
        else:
            if self.minimum is not None:
                s["minimum"] = self.minimum
            if self.maximum is not None:
                s["maximum"] = self.maximum
        if self.enum is not None:
            s["enum"] = list(self.enum)
        if not self.required:
            s["default"] = self.default
        return s


@dataclass(frozen=True)
class Readback:
    """A ``command`` step's declared readback: files whose digests an oracle can compare.

    ``changes_on_apply`` is the operator's promise that running the command
    always changes at least one of these files; only then may an unchanged
    readback be reported as ``not_applied`` (otherwise it is ``inconclusive``).
    """

    paths: tuple[str, ...]
    changes_on_apply: bool = False


@dataclass(frozen=True)
class StepSpec:
    """One catalog step. Immutable; build through :meth:`Catalog.load`.

    ``params_schema`` is the JSON Schema the agent's parameters must satisfy
    (``additionalProperties: false``). ``tool_name`` is the registry tool the
    step is bound to; ``oracle_name`` the read-only reconciliation oracle
    (``None`` when the step is not ``reconcilable``).
    """

    name: str
    kind: Kind
    description: str
    effect: Effect
    idempotent: bool
    verifier: bool
    timeout_s: float
    params: tuple[ParamSpec, ...]
    params_schema: dict[str, Any]
    reconcilable: bool
    # command
    argv: tuple[str, ...] = ()
    cwd: str = "."
    env: tuple[str, ...] = ()
    env_set: tuple[tuple[str, str], ...] = ()
    readback: Readback | None = None
    # write_file / read_file / fingerprint
    paths: tuple[str, ...] = ()
    max_bytes: int = DEFAULT_MAX_BYTES
    # tool: the registered tool this step runs
    tool: str | None = None
    _validator: Validator | None = field(default=None, repr=False, compare=False)

    @property
    def tool_name(self) -> str:
        """The registry tool a run of this step executes (a ``tool`` step: the bound tool itself)."""
        return self.tool if self.kind == "tool" and self.tool else STEP_TOOL_PREFIX + self.name

    @property
    def oracle_name(self) -> str | None:
        return ORACLE_TOOL_PREFIX + self.name if self.reconcilable else None

    @property
    def path_params(self) -> tuple[str, ...]:
        """Names of parameters that are workspace paths (authority checks them)."""
        return ("path",) if self.kind in ("write_file", "read_file") else ()

    def validate_params(self, params: Any) -> dict[str, Any]:
        """Check ``params`` against the schema; return them with defaults filled.

        Raises :class:`PlanInvalid` naming the step and each violation. The
        executor performs the same schema check on the bound tool; this lets
        a controller reject a plan at preview time.
        """
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise PlanInvalid(f"parameters of step {self.name!r} must be an object, got {type(params).__name__}")
        # a strict-mode client says "use the default" with null (the published schemas accept it)
        optional = {p.name for p in self.params if not p.required}
        params = {k: v for k, v in params.items() if not (v is None and k in optional)}
        assert self._validator is not None
        found = self._validator.violations(params)
        if found:
            msg = "; ".join(f"{v['path']}: {v['message']}" for v in found[:5])
            raise PlanInvalid(
                f"invalid parameters for step {self.name!r}: {msg}",
                details={"step": self.name, "violations": found[:20]},
            )
        for p in self.params:
            v = params.get(p.name)
            if p.pattern is not None and isinstance(v, str) and re.fullmatch(p.pattern, v) is None:
                # a second, independent check of the whole value (see ParamSpec.schema)
                raise PlanInvalid(
                    f"invalid parameters for step {self.name!r}: $.{p.name}: {v[:80]!r} does not match the pattern {p.pattern!r} as a whole",
                    details={"step": self.name, "param": p.name, "pattern": p.pattern},
                )
        out = dict(params)
        for p in self.params:
            if not p.required and p.name not in out:
                out[p.name] = p.default
        return out

    def expand_argv(self, params: Mapping[str, Any]) -> list[str]:
        """The concrete argv for validated ``params``.

        A slot element becomes exactly one argv element holding the value
        (integers as decimal text); nothing is split, globbed or passed to a
        shell, so ``"x; rm -rf /"`` stays one literal argument.
        """
        if self.kind != "command":
            raise PlanInvalid(f"step {self.name!r} is a {self.kind} step; it has no argv")
        full = self.validate_params(dict(params))
        out: list[str] = []
        for el in self.argv:
            m = _SLOT_RE.match(el)
            if m:
                out.append(str(full[m.group(1)]))
            else:
                out.append(el.replace("{{", "{").replace("}}", "}"))
        return out

    def describe(self) -> dict[str, Any]:
        """A JSON view of the step for agents and operators (no handler internals)."""
        d: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "effect": self.effect,
            "idempotent": self.idempotent,
            "verifier": self.verifier,
            "reconcilable": self.reconcilable,
            "tool": self.tool_name,
            "params_schema": self.params_schema,
        }
        if self.kind == "command":
            d["argv"] = list(self.argv)
            d["cwd"] = self.cwd
            d["timeout_s"] = self.timeout_s
        elif self.kind != "tool":
            d["paths"] = list(self.paths)
        return d


@dataclass(frozen=True)
class Catalog:
    """A loaded, validated catalog. ``digest`` binds attempts and grants to its meaning."""

    path: Path | None
    workspace: Path
    steps: dict[str, StepSpec]
    digest: str
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Catalog:
        p = Path(path)
        try:
            data = p.read_bytes()
            mode = p.stat().st_mode
        except OSError as exc:
            raise CatalogInvalid(f"catalog {str(p)!r} cannot be read: {exc.strerror or exc}", details={"file": str(p)}) from None
        if mode & 0o002:
            # The catalog decides what an agent may run: anyone able to edit it could widen that.
            raise CatalogInvalid(
                f"catalog {str(p)!r} is world-writable; anyone could change what the agent may run (chmod o-w)",
                details={"file": str(p)},
            )
        try:
            raw = tomllib.loads(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise CatalogInvalid(f"catalog {str(p)!r} is not UTF-8", details={"file": str(p)}) from None
        except tomllib.TOMLDecodeError as exc:
            raise CatalogInvalid(f"catalog {str(p)!r} is not valid TOML: {exc}", details={"file": str(p)}) from None
        return cls.from_dict(raw, base_dir=p.resolve().parent, source=str(p))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], *, base_dir: str | os.PathLike[str], source: str = "<catalog>") -> Catalog:
        """Build from an already-parsed mapping (tests, embedding). ``base_dir`` anchors a relative workspace."""
        return _parse(dict(raw), Path(base_dir), source)

    def step(self, name: str) -> StepSpec:
        """The step called ``name``; :class:`UnknownStep` names close matches otherwise."""
        s = self.steps.get(name) if isinstance(name, str) else None
        if s is None:
            candidates = difflib.get_close_matches(str(name), list(self.steps), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(repr(c) for c in candidates)}?" if candidates else ""
            raise UnknownStep(
                f"unknown step {name!r}{hint} (the catalog declares: {', '.join(sorted(self.steps)) or 'none'})",
                details={"step": str(name)[:200], "candidates": candidates},
            )
        return s

    def describe(self) -> dict[str, Any]:
        return {
            "workspace": str(self.workspace),
            "digest": self.digest,
            "steps": [self.steps[n].describe() for n in sorted(self.steps)],
        }


# -- parsing: the file's shape as pydantic models, then the rules that need the workspace --


class _Ctx:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, msg: str, *, step: str | None = None, field_: str | None = None) -> CatalogInvalid:
        where = f"catalog {self.source!r}"
        if step is not None:
            where += f", step {step!r}"
        if field_ is not None:
            where += f", field {field_!r}"
        details: dict[str, Any] = {"file": self.source}
        if step is not None:
            details["step"] = step
        if field_ is not None:
            details["field"] = field_
        return CatalogInvalid(f"{where}: {msg}", details=details)


class _Decl(BaseModel):
    # strict: TOML's true is not 1, "5" is not 5; extra="forbid": a misspelt key is an error, not ignored
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _pattern_list(v: list[str]) -> list[str]:
    for p in v:
        why = check_pattern(p)
        if why:
            raise ValueError(why)
    return v


PatternList = Annotated[list[str], Field(min_length=1), AfterValidator(_pattern_list)]
NonEmpty = Annotated[str, Field(min_length=1)]
_UNSET: Any = object()


class ParamDecl(_Decl):
    """``[steps.<name>.params.<slot>]``."""

    type: Literal["string", "integer"]
    description: str = ""
    pattern: NonEmpty | None = None
    enum: Annotated[list[StrictStr | StrictInt], Field(min_length=1)] | None = None
    max_length: Annotated[int, Field(ge=1, le=MAX_STRING_MAX)] = DEFAULT_STRING_MAX
    minimum: int | None = None
    maximum: int | None = None
    default: Any = _UNSET

    @model_validator(mode="after")
    def _by_type(self) -> ParamDecl:
        if self.enum is not None and not all(isinstance(x, str if self.type == "string" else int) for x in self.enum):
            raise ValueError(f"'enum' must be a non-empty list of {self.type}s")
        if self.type == "string":
            if self.pattern is None and self.enum is None:
                raise ValueError("a string slot needs a 'pattern' (or an 'enum') so the operator decides what an agent may pass")
            if self.pattern is not None:
                try:
                    re.compile(self.pattern)
                except re.error as exc:
                    raise ValueError(f"'pattern' is not a valid regular expression: {exc}") from None
            if self.minimum is not None or self.maximum is not None:
                raise ValueError("'minimum'/'maximum' apply to integer slots only")
        elif self.pattern is not None or "max_length" in self.model_fields_set:
            raise ValueError("'pattern'/'max_length' apply to string slots only")
        return self

    def spec(self, name: str) -> ParamSpec:
        return ParamSpec(
            name=name, type=self.type, description=self.description, pattern=self.pattern,
            enum=tuple(self.enum) if self.enum is not None else None, max_length=self.max_length,
            minimum=self.minimum, maximum=self.maximum, default=None if self.default is _UNSET else self.default,
            required=self.default is _UNSET,
        )


def _slot_names(v: dict[str, ParamDecl]) -> dict[str, ParamDecl]:
    for n in v:
        if not SLOT_NAME_RE.match(n):
            raise ValueError(f"parameter name {n!r} is invalid: use ^[a-z_][a-z0-9_]{{0,63}}$")
    return v


Params = Annotated[dict[str, ParamDecl], AfterValidator(_slot_names)]


class _StepDecl(_Decl):
    description: str

    @field_validator("description")
    @classmethod
    def _said(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("a non-empty description is required (the agent reads it)")
        return v


class ReadbackDecl(_Decl):
    paths: PatternList
    changes_on_apply: bool = False


def _env_names(v: list[str]) -> list[str]:
    for e in v:
        if not ENV_NAME_RE.match(e):
            raise ValueError(f"{e!r} is not an environment variable name")
    return v


def _env_values(v: dict[str, str]) -> dict[str, str]:
    for k, val in v.items():
        if not ENV_NAME_RE.match(k) or "\x00" in val:
            raise ValueError("must be a table of NAME = \"value\" strings")
    return v


class CommandDecl(_StepDecl):
    kind: Literal["command"]
    effect: Effect = "external"
    idempotent: bool = False
    verifier: bool = False
    timeout_s: Annotated[float, Field(gt=0, le=MAX_TIMEOUT_S)] = DEFAULT_TIMEOUT_S
    argv: Annotated[list[str], Field(min_length=1)]
    cwd: str = "."
    env: Annotated[list[str], AfterValidator(_env_names)] = []
    env_set: Annotated[dict[str, str], AfterValidator(_env_values)] = {}
    readback: ReadbackDecl | None = None
    params: Params = {}

    @model_validator(mode="after")
    def _readback_needs_an_effect(self) -> CommandDecl:
        if self.effect == "read" and self.readback is not None:
            raise _FieldError("readback", "a read step has no effect to reconcile; remove 'readback'")
        return self


class WriteFileDecl(_StepDecl):
    kind: Literal["write_file"]
    idempotent: bool = True
    paths: PatternList
    max_bytes: Annotated[int, Field(ge=1, le=MAX_MAX_BYTES)] = DEFAULT_MAX_BYTES


class ReadFileDecl(_StepDecl):
    kind: Literal["read_file"]
    paths: PatternList
    max_bytes: Annotated[int, Field(ge=1, le=MAX_MAX_BYTES)] = DEFAULT_MAX_BYTES


class FingerprintDecl(_StepDecl):
    kind: Literal["fingerprint"]
    paths: PatternList


class ToolDecl(_StepDecl):
    kind: Literal["tool"]
    tool: str
    effect: Effect = "external"
    idempotent: bool = False
    reconcile: bool = False
    params: Params = {}

    @field_validator("tool")
    @classmethod
    def _a_tool_of_yours(cls, v: str) -> str:
        if not TOOL_NAME_RE.match(v):
            raise ValueError(f"must name a registered tool (^[A-Za-z0-9_.-]{{1,128}}$), got {v!r}")
        if v.startswith((STEP_TOOL_PREFIX, ORACLE_TOOL_PREFIX, "of_work_")):
            raise ValueError(f"{v!r} is one of the work controller's own tools; bind a tool of yours")
        return v

    @model_validator(mode="after")
    def _reconcile_needs_an_effect(self) -> ToolDecl:
        if self.effect == "read" and self.reconcile:
            raise _FieldError("reconcile", "a read step has no effect to reconcile; remove 'reconcile'")
        return self


StepDecl = Annotated[
    CommandDecl | WriteFileDecl | ReadFileDecl | FingerprintDecl | ToolDecl, Field(discriminator="kind")
]


class CatalogDecl(_Decl):
    """The whole file (see the module docstring)."""

    version: int
    workspace: NonEmpty
    steps: Annotated[dict[str, StepDecl], Field(min_length=1)]


class _FieldError(ValueError):
    """A model rule about one field other than where pydantic would put it."""

    def __init__(self, field_: str, msg: str) -> None:
        super().__init__(msg)
        self.field_ = field_


_HINTS = {
    "version": f"'version' must be {CATALOG_VERSION}",
    "workspace": "'workspace' must be a non-empty string (a directory, relative to the catalog file)",
    "steps": "'steps' must be a table with at least one [steps.<name>] entry",
}


def _invalid(c: _Ctx, raw: dict[str, Any], exc: ValidationError) -> CatalogInvalid:
    """The first pydantic error as ``CatalogInvalid(file, step, field)``."""
    err = exc.errors(include_url=False)[0]
    loc = [str(x) for x in err["loc"]]
    msg = str(err["msg"]).removeprefix("Value error, ")
    ctx_err = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_err, _FieldError):
        loc = loc + [ctx_err.field_]
    if not loc or loc[0] != "steps" or len(loc) < 2:
        if err["type"] == "extra_forbidden":
            return c.fail(f"unknown top-level key {loc[0]!r}; allowed: version, workspace, steps")
        top = loc[0] if loc else None
        return c.fail(_HINTS.get(top or "", msg) + (f", got {raw.get(top)!r}" if top in raw else ""), field_=top)
    step, rest = loc[1], loc[2:]
    if rest and rest[0] in KINDS:
        rest = rest[1:]  # the discriminated union's tag
    body = (raw.get("steps") or {}).get(step)
    kind = body.get("kind") if isinstance(body, dict) else None
    if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return c.fail(f"must be one of {', '.join(KINDS)}, got {kind!r}", step=step, field_="kind")
    if not rest:
        return c.fail("must be a table", step=step)
    if err["type"] == "extra_forbidden":
        if len(rest) == 1:
            allowed = sorted(_DECLS[kind].model_fields) if kind in _DECLS else []
            return c.fail(f"unknown field {rest[0]!r} for a {kind} step; allowed: {', '.join(allowed)}", step=step)
        return c.fail(f"unknown key {rest[-1]!r}", step=step, field_=".".join(rest[:-1]))
    fld = ".".join(x for x in rest if not x.isdigit()) or None
    if fld == "params" and "parameter name" not in msg:
        msg = "must be a table of [steps.<name>.params.<slot>] tables"
    if err["type"] == "missing":
        msg = "is required" + (" (the agent reads it)" if fld == "description" else "")
    elif err["type"] != "value_error" and "input" in err:
        msg += f", got {repr(err['input'])[:80]}"
    return c.fail(msg, step=step, field_=fld)


_DECLS: dict[str, type[_StepDecl]] = {
    "command": CommandDecl, "write_file": WriteFileDecl, "read_file": ReadFileDecl, "fingerprint": FingerprintDecl, "tool": ToolDecl,
}


def _parse(raw: dict[str, Any], base_dir: Path, source: str) -> Catalog:
    c = _Ctx(source)
    for name in (raw.get("steps") or {}) if isinstance(raw.get("steps"), dict) else ():
        if not STEP_NAME_RE.match(name):
            raise c.fail(f"step name {name!r} is invalid: use ^[a-z][a-z0-9_-]{{0,63}}$", step=name)
    try:
        decl = CatalogDecl.model_validate(raw)
    except ValidationError as exc:
        raise _invalid(c, raw, exc) from None
    if decl.version != CATALOG_VERSION:
        raise c.fail(f"'version' must be {CATALOG_VERSION}, got {decl.version!r}", field_="version")
    wpath = Path(os.path.expanduser(decl.workspace))
    if not wpath.is_absolute():
        wpath = base_dir / wpath
    workspace = Path(os.path.realpath(wpath))
    if not workspace.is_dir():
        raise c.fail(f"workspace {str(wpath)!r} does not exist or is not a directory", field_="workspace")
    steps = {name: _step(c, name, body, workspace) for name, body in decl.steps.items()}
    try:
        dg = _digest({"catalog": raw, "workspace": str(workspace)})
    except NonJsonValue as exc:
        raise c.fail(f"contains a value with no JSON form (dates/times are not allowed): {exc.message}") from None
    return Catalog(path=Path(source) if source != "<catalog>" else None, workspace=workspace, steps=steps, digest=dg, raw=raw)


def _step(c: _Ctx, name: str, d: Any, workspace: Path) -> StepSpec:
    """A validated declaration as a :class:`StepSpec` (plus the rules that need the workspace or several fields)."""
    if isinstance(d, CommandDecl):
        return _command(c, name, d, workspace)
    if isinstance(d, ToolDecl):
        params = {pn: pd.spec(pn) for pn, pd in d.params.items()}
        params_schema, validator = _params_schema(c, name, params)
        return StepSpec(
            name=name, kind="tool", description=d.description, effect=d.effect, idempotent=d.idempotent, verifier=False,
            timeout_s=DEFAULT_TIMEOUT_S, params=tuple(params.values()), params_schema=params_schema, reconcilable=d.reconcile,
            tool=d.tool, _validator=validator,
        )
    paths = tuple(d.paths)
    path_prop = {"type": "string", "minLength": 1, "maxLength": 4096, "description": "path relative to the workspace; must match " + ", ".join(paths)}
    if isinstance(d, WriteFileDecl):
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {
                "path": path_prop,
                "content": {"type": "string", "description": "the file's new content (text, or base64 with encoding=base64)"},
                "encoding": {"enum": ["utf-8", "base64"], "default": "utf-8"},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        }
        effect: Effect = "write"
        idempotent, reconcilable, max_bytes = d.idempotent, True, d.max_bytes
    elif isinstance(d, ReadFileDecl):
        schema = {"type": "object", "properties": {"path": path_prop}, "required": ["path"], "additionalProperties": False}
        effect, idempotent, reconcilable, max_bytes = "read", True, False, d.max_bytes
    else:
        schema = {"type": "object", "properties": {}, "additionalProperties": False}
        effect, idempotent, reconcilable, max_bytes = "read", True, False, DEFAULT_MAX_BYTES
    return StepSpec(
        name=name, kind=d.kind, description=d.description, effect=effect, idempotent=idempotent, verifier=False,
        timeout_s=DEFAULT_TIMEOUT_S, params=(), params_schema=schema, reconcilable=reconcilable,
        paths=paths, max_bytes=max_bytes, _validator=Validator(schema, what=f"params of step {name!r}"),
    )


def _command(c: _Ctx, name: str, d: CommandDecl, workspace: Path) -> StepSpec:
    argv = tuple(d.argv)
    params = {pn: pd.spec(pn) for pn, pd in d.params.items()}
    used: set[str] = set()
    for i, el in enumerate(argv):
        if "\x00" in el:
            raise c.fail(f"argv[{i}] contains NUL", step=name, field_="argv")
        m = _SLOT_RE.match(el)
        if m:
            slot = m.group(1)
            if slot not in params:
                raise c.fail(f"argv[{i}] uses slot {{{slot}}} but no [steps.{name}.params.{slot}] declares it", step=name, field_="argv")
            used.add(slot)
            continue
        # Outside a whole-element slot every brace must be doubled: a slot
        # can never be spliced into part of an argument.
        stripped = el.replace("{{", "").replace("}}", "")
        if "{" in stripped or "}" in stripped:
            raise c.fail(
                f"argv[{i}] {el!r} has a brace that is not a whole-element slot; a slot must be the entire element "
                "(\"{name}\"), literal braces are written \"{{\" and \"}}\"",
                step=name, field_="argv",
            )
    if not argv[0]:
        raise c.fail("argv[0] (the program) must not be empty", step=name, field_="argv")
    if _SLOT_RE.match(argv[0]):
        raise c.fail("argv[0] (the program) cannot be a parameter slot", step=name, field_="argv")
    unused = sorted(set(params) - used)
    if unused:
        raise c.fail(f"declared parameter(s) {', '.join(map(repr, unused))} are not used in argv", step=name, field_="params")
    cwd = d.cwd
    if os.path.isabs(cwd) or ".." in cwd.replace("\\", "/").split("/"):
        raise c.fail(f"must be a relative directory inside the workspace without '..', got {cwd!r}", step=name, field_="cwd")
    cwd = os.path.normpath(cwd) if cwd else "."
    real = os.path.realpath(os.path.join(workspace, cwd))
    if not (real == str(workspace) or real.startswith(str(workspace) + os.sep)) or not os.path.isdir(real):
        raise c.fail(f"{cwd!r} does not resolve to a directory inside the workspace", step=name, field_="cwd")
    readback = Readback(tuple(d.readback.paths), d.readback.changes_on_apply) if d.readback is not None else None
    schema, validator = _params_schema(c, name, params)
    return StepSpec(
        name=name, kind="command", description=d.description, effect=d.effect, idempotent=d.idempotent, verifier=d.verifier,
        timeout_s=float(d.timeout_s), params=tuple(params.values()), params_schema=schema,
        reconcilable=readback is not None, argv=argv, cwd=cwd, env=tuple(d.env),
        env_set=tuple(sorted(d.env_set.items())), readback=readback, _validator=validator,
    )


def _params_schema(c: _Ctx, name: str, params: dict[str, ParamSpec]) -> tuple[dict[str, Any], Validator]:
    """The JSON Schema of declared parameter slots, and its validator (each default checked against it)."""
    props = {p.name: p.schema() for p in params.values()}
    required = sorted(p.name for p in params.values() if p.required)
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = required
    try:
        validator = Validator(schema, what=f"params of step {name!r}")
        for p in params.values():
            if not p.required and validator.violations({p.name: p.default}):
                raise c.fail(f"default {p.default!r} does not satisfy its own declaration", step=name, field_=f"params.{p.name}.default")
    except CatalogInvalid:
        raise
    except Exception as exc:  # a bad operator regex surfaces here
        raise c.fail(f"parameter declarations do not form a valid schema: {exc}", step=name, field_="params") from None
    return schema, validator


__all__ = ["Catalog", "StepSpec", "ParamSpec", "Readback", "STEP_TOOL_PREFIX", "ORACLE_TOOL_PREFIX", "CATALOG_VERSION"]
