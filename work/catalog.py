"""The operator's step catalog: a trusted TOML file naming a workspace and its steps.

An agent never names a command or a tool: it picks a *step* from this catalog
and fills only the parameters the step declares. Every step is bound to one
registry tool (``of_step.<name>``, built by :mod:`openfunctions.work.steps`).

File format (version 1; see ``work/example_catalog.toml`` and
``docs/work/catalog.md``)::

    version = 1                      # required, must be 1
    workspace = "."                  # required; relative to the catalog file's directory

    [steps.<name>]                   # name: ^[a-z][a-z0-9_-]{0,63}$
    kind = "command" | "write_file" | "read_file" | "fingerprint"   # required
    description = "..."              # required, shown to the agent
    effect = "read" | "write" | "external"   # command only (default "external");
                                     # write_file is "write", read kinds are "read"
    idempotent = true|false          # default: false for command, true otherwise
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
from typing import Any, Literal

from openfunctions.core import digest as _digest
from openfunctions.core.errors import NonJsonValue
from openfunctions.core import Validator

from ._paths import check_pattern
from .errors import CatalogInvalid, PlanInvalid, UnknownStep

CATALOG_VERSION = 1
STEP_TOOL_PREFIX = "of_step."
ORACLE_TOOL_PREFIX = "of_oracle."
STEP_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
SLOT_NAME_RE = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
_SLOT_RE = re.compile(r"^\{([a-z_][a-z0-9_]{0,63})\}$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_TIMEOUT_S = 86400.0
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_MAX_BYTES = 1024 * 1024
MAX_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_STRING_MAX = 256
MAX_STRING_MAX = 4096

Kind = Literal["command", "write_file", "read_file", "fingerprint"]
Effect = Literal["read", "write", "external"]
KINDS = ("command", "write_file", "read_file", "fingerprint")
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
    _validator: Validator | None = field(default=None, repr=False, compare=False)

    @property
    def tool_name(self) -> str:
        return STEP_TOOL_PREFIX + self.name

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
        else:
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
    def load(cls, path: str | os.PathLike[str]) -> "Catalog":
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
    def from_dict(cls, raw: Mapping[str, Any], *, base_dir: str | os.PathLike[str], source: str = "<catalog>") -> "Catalog":
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


# -- parsing ----------------------------------------------------------------


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


_STEP_KEYS = {
    "command": {"kind", "description", "effect", "idempotent", "verifier", "timeout_s", "argv", "cwd", "env", "env_set", "readback", "params"},
    "write_file": {"kind", "description", "idempotent", "paths", "max_bytes"},
    "read_file": {"kind", "description", "paths", "max_bytes"},
    "fingerprint": {"kind", "description", "paths"},
}
_PARAM_KEYS = {"type", "description", "pattern", "enum", "max_length", "minimum", "maximum", "default"}


def _parse(raw: dict[str, Any], base_dir: Path, source: str) -> Catalog:
    c = _Ctx(source)
    unknown = sorted(set(raw) - {"version", "workspace", "steps"})
    if unknown:
        raise c.fail(f"unknown top-level key(s) {', '.join(map(repr, unknown))}; allowed: version, workspace, steps")
    if raw.get("version") != CATALOG_VERSION:
        raise c.fail(f"'version' must be {CATALOG_VERSION}, got {raw.get('version')!r}", field_="version")
    ws = raw.get("workspace")
    if not isinstance(ws, str) or not ws:
        raise c.fail("'workspace' must be a non-empty string (a directory, relative to the catalog file)", field_="workspace")
    wpath = Path(os.path.expanduser(ws))
    if not wpath.is_absolute():
        wpath = base_dir / wpath
    workspace = Path(os.path.realpath(wpath))
    if not workspace.is_dir():
        raise c.fail(f"workspace {str(wpath)!r} does not exist or is not a directory", field_="workspace")
    steps_raw = raw.get("steps")
    if not isinstance(steps_raw, dict) or not steps_raw:
        raise c.fail("'steps' must be a table with at least one [steps.<name>] entry", field_="steps")
    steps: dict[str, StepSpec] = {}
    for name, body in steps_raw.items():
        steps[name] = _parse_step(c, name, body, workspace)
    try:
        dg = _digest({"catalog": raw, "workspace": str(workspace)})
    except NonJsonValue as exc:
        raise c.fail(f"contains a value with no JSON form (dates/times are not allowed): {exc.message}") from None
    return Catalog(path=Path(source) if source != "<catalog>" else None, workspace=workspace, steps=steps, digest=dg, raw=raw)


def _bool(c: _Ctx, body: dict[str, Any], key: str, default: bool, step: str) -> bool:
    v = body.get(key, default)
    if not isinstance(v, bool):
        raise c.fail(f"must be true or false, got {v!r}", step=step, field_=key)
    return v


def _str_list(c: _Ctx, v: Any, step: str, key: str, *, nonempty: bool = True) -> tuple[str, ...]:
    if not isinstance(v, list) or (nonempty and not v) or not all(isinstance(x, str) for x in v):
        raise c.fail(f"must be a {'non-empty ' if nonempty else ''}list of strings", step=step, field_=key)
    return tuple(v)


def _patterns(c: _Ctx, v: Any, step: str, key: str) -> tuple[str, ...]:
    pats = _str_list(c, v, step, key)
    for p in pats:
        why = check_pattern(p)
        if why:
            raise c.fail(why, step=step, field_=key)
    return pats


def _parse_step(c: _Ctx, name: Any, body: Any, workspace: Path) -> StepSpec:
    if not isinstance(name, str) or not STEP_NAME_RE.match(name):
        raise c.fail(f"step name {name!r} is invalid: use ^[a-z][a-z0-9_-]{{0,63}}$", step=str(name))
    if not isinstance(body, dict):
        raise c.fail("must be a table", step=name)
    kind = body.get("kind")
    if kind not in KINDS:
        raise c.fail(f"must be one of {', '.join(KINDS)}, got {kind!r}", step=name, field_="kind")
    extra = sorted(set(body) - _STEP_KEYS[kind])
    if extra:
        raise c.fail(
            f"unknown field(s) for a {kind} step: {', '.join(map(repr, extra))}; allowed: {', '.join(sorted(_STEP_KEYS[kind]))}",
            step=name,
        )
    desc = body.get("description")
    if not isinstance(desc, str) or not desc.strip():
        raise c.fail("a non-empty description is required (the agent reads it)", step=name, field_="description")

    if kind == "command":
        return _parse_command(c, name, body, desc, workspace)

    paths = _patterns(c, body.get("paths"), name, "paths")
    max_bytes = body.get("max_bytes", DEFAULT_MAX_BYTES)
    if kind != "fingerprint" and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or not 1 <= max_bytes <= MAX_MAX_BYTES):
        raise c.fail(f"must be an integer in 1..{MAX_MAX_BYTES}", step=name, field_="max_bytes")
    path_prop = {"type": "string", "minLength": 1, "maxLength": 4096, "description": "path relative to the workspace; must match " + ", ".join(paths)}
    if kind == "write_file":
        schema = {
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
        idempotent = _bool(c, body, "idempotent", True, name)
        reconcilable = True
    elif kind == "read_file":
        schema = {"type": "object", "properties": {"path": path_prop}, "required": ["path"], "additionalProperties": False}
        effect, idempotent, reconcilable = "read", True, False
    else:
        schema = {"type": "object", "properties": {}, "additionalProperties": False}
        effect, idempotent, reconcilable = "read", True, False
    return StepSpec(
        name=name, kind=kind, description=desc, effect=effect, idempotent=idempotent, verifier=False,
        timeout_s=DEFAULT_TIMEOUT_S, params=(), params_schema=schema, reconcilable=reconcilable,
        paths=paths, max_bytes=max_bytes if kind != "fingerprint" else DEFAULT_MAX_BYTES,
        _validator=Validator(schema, what=f"params of step {name!r}"),
    )


def _parse_command(c: _Ctx, name: str, body: dict[str, Any], desc: str, workspace: Path) -> StepSpec:
    effect = body.get("effect", "external")
    if effect not in EFFECTS:
        raise c.fail(f"must be one of {', '.join(EFFECTS)}, got {effect!r}", step=name, field_="effect")
    idempotent = _bool(c, body, "idempotent", False, name)
    verifier = _bool(c, body, "verifier", False, name)
    t = body.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= MAX_TIMEOUT_S:
        raise c.fail(f"must be a number in (0, {int(MAX_TIMEOUT_S)}] seconds, got {t!r}", step=name, field_="timeout_s")
    argv = _str_list(c, body.get("argv"), name, "argv")
    params_raw = body.get("params", {})
    if not isinstance(params_raw, dict):
        raise c.fail("must be a table of [steps.<name>.params.<slot>] tables", step=name, field_="params")
    params = {pn: _parse_param(c, name, pn, pb) for pn, pb in params_raw.items()}
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
    cwd = body.get("cwd", ".")
    if not isinstance(cwd, str) or os.path.isabs(cwd) or ".." in cwd.replace("\\", "/").split("/"):
        raise c.fail(f"must be a relative directory inside the workspace without '..', got {cwd!r}", step=name, field_="cwd")
    cwd = os.path.normpath(cwd) if cwd else "."
    real = os.path.realpath(os.path.join(workspace, cwd))
    if not (real == str(workspace) or real.startswith(str(workspace) + os.sep)) or not os.path.isdir(real):
        raise c.fail(f"{cwd!r} does not resolve to a directory inside the workspace", step=name, field_="cwd")
    env = _str_list(c, body.get("env", []), name, "env", nonempty=False)
    for e in env:
        if not ENV_NAME_RE.match(e):
            raise c.fail(f"{e!r} is not an environment variable name", step=name, field_="env")
    env_set_raw = body.get("env_set", {})
    if not isinstance(env_set_raw, dict) or not all(
        isinstance(k, str) and ENV_NAME_RE.match(k) and isinstance(v, str) and "\x00" not in v for k, v in env_set_raw.items()
    ):
        raise c.fail("must be a table of NAME = \"value\" strings", step=name, field_="env_set")
    readback: Readback | None = None
    rb = body.get("readback")
    if rb is not None:
        if not isinstance(rb, dict) or set(rb) - {"paths", "changes_on_apply"}:
            raise c.fail("must be a table with 'paths' and optional 'changes_on_apply'", step=name, field_="readback")
        readback = Readback(
            paths=_patterns(c, rb.get("paths"), name, "readback.paths"),
            changes_on_apply=_bool(c, rb, "changes_on_apply", False, name),
        )
    if effect == "read" and readback is not None:
        raise c.fail("a read step has no effect to reconcile; remove 'readback'", step=name, field_="readback")
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
    return StepSpec(
        name=name, kind="command", description=desc, effect=effect, idempotent=idempotent, verifier=verifier,
        timeout_s=float(t), params=tuple(params.values()), params_schema=schema,
        reconcilable=readback is not None, argv=argv, cwd=cwd, env=env,
        env_set=tuple(sorted(env_set_raw.items())), readback=readback, _validator=validator,
    )


def _parse_param(c: _Ctx, step: str, pname: Any, body: Any) -> ParamSpec:
    fld = f"params.{pname}"
    if not isinstance(pname, str) or not SLOT_NAME_RE.match(pname):
        raise c.fail(f"parameter name {pname!r} is invalid: use ^[a-z_][a-z0-9_]{{0,63}}$", step=step, field_=fld)
    if not isinstance(body, dict):
        raise c.fail("must be a table", step=step, field_=fld)
    extra = sorted(set(body) - _PARAM_KEYS)
    if extra:
        raise c.fail(f"unknown key(s) {', '.join(map(repr, extra))}; allowed: {', '.join(sorted(_PARAM_KEYS))}", step=step, field_=fld)
    typ = body.get("type")
    if typ not in ("string", "integer"):
        raise c.fail(f"'type' must be \"string\" or \"integer\", got {typ!r}", step=step, field_=fld)
    desc = body.get("description", "")
    if not isinstance(desc, str):
        raise c.fail("'description' must be a string", step=step, field_=fld)
    enum = body.get("enum")
    if enum is not None:
        want = str if typ == "string" else int
        if not isinstance(enum, list) or not enum or not all(isinstance(x, want) and not isinstance(x, bool) for x in enum):
            raise c.fail(f"'enum' must be a non-empty list of {typ}s", step=step, field_=fld)
        enum = tuple(enum)
    pattern = body.get("pattern")
    max_length = body.get("max_length", DEFAULT_STRING_MAX)
    minimum, maximum = body.get("minimum"), body.get("maximum")
    if typ == "string":
        if pattern is None and enum is None:
            raise c.fail(
                "a string slot needs a 'pattern' (or an 'enum') so the operator decides what an agent may pass",
                step=step, field_=fld,
            )
        if pattern is not None:
            if not isinstance(pattern, str) or not pattern:
                raise c.fail("'pattern' must be a non-empty string", step=step, field_=fld)
            try:
                re.compile(pattern)
            except re.error as exc:
                raise c.fail(f"'pattern' is not a valid regular expression: {exc}", step=step, field_=fld) from None
        if isinstance(max_length, bool) or not isinstance(max_length, int) or not 1 <= max_length <= MAX_STRING_MAX:
            raise c.fail(f"'max_length' must be an integer in 1..{MAX_STRING_MAX}", step=step, field_=fld)
        if minimum is not None or maximum is not None:
            raise c.fail("'minimum'/'maximum' apply to integer slots only", step=step, field_=fld)
    else:
        if pattern is not None or "max_length" in body:
            raise c.fail("'pattern'/'max_length' apply to string slots only", step=step, field_=fld)
        for k, v in (("minimum", minimum), ("maximum", maximum)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise c.fail(f"'{k}' must be an integer", step=step, field_=fld)
    has_default = "default" in body
    return ParamSpec(
        name=pname, type=typ, description=desc, pattern=pattern, enum=enum, max_length=max_length,
        minimum=minimum, maximum=maximum, default=body.get("default"), required=not has_default,
    )


__all__ = ["Catalog", "StepSpec", "ParamSpec", "Readback", "STEP_TOOL_PREFIX", "ORACLE_TOOL_PREFIX", "CATALOG_VERSION"]
