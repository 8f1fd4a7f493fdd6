"""The ``of_work_*`` MCP tools: the work lifecycle as registry tools.

Every tool is a plain registry tool: it runs through the shared executor
(schema validation, policy, scheduling, receipts) before the controller
sees it, so a plan naming an unknown step or a wrongly typed parameter is
rejected by the executor with its usual diagnostics (the ``of_work_preview``
input schema is generated from the catalog). The caller's identity is the
trusted context's ``principal`` (the server sets it from its
configuration); no tool takes a principal argument.

Replies are bounded at 32 KiB (canonical UTF-8 JSON and MCP's pretty text)
by :func:`openfunctions.artifacts.project_reply`: a larger reply keeps the
identity, state and evidence summaries and puts the full canonical JSON in
an artifact of the attempt (readable with ``of_work_artifact_read``). The
store reuses an artifact for identical content, so an unchanged status read
returns the same artifact id, also after a restart. Refusals are raised as
:class:`ToolError` with a bounded message and ``effect_happened=False``.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from openfunctions.core import (
    OpenFunctionsError,
    ToolDefinition,
    ToolError,
    ToolExecutionContext,
    Validator,
    complete_strict_schema,
    define_tool,
)

from ._controller import DISPATCHED_ATTR, MAX_PLAN_STEPS, WorkController
from ._errors import WorkError
from ._schemas import output_schema

REPLY_BUDGET = 32 * 1024
MAX_ERROR_CHARS = 4000
ID_PATTERN = "^[a-z]{2,5}_[0-9a-f]{32}$"

WORK_TOOL_NAMES = (
    "of_work_catalog", "of_work_preview", "of_work_start", "of_work_status", "of_work_run_step",
    "of_work_verify", "of_work_reconcile", "of_work_complete", "of_work_cancel", "of_work_artifact_read",
)

class ArtifactProjection(BaseModel):
    """Present when the full reply was larger than the 32 KiB budget (or could not be stored)."""

    available: bool
    artifact_id: str = None  # type: ignore[assignment]  # absent, never null
    sha256: str = None  # type: ignore[assignment]
    size: int = None  # type: ignore[assignment]
    media_type: str = None  # type: ignore[assignment]
    read_with: str = None  # type: ignore[assignment]
    reason: str = None  # type: ignore[assignment]


class _Reply(BaseModel):
    # Replies over budget become a projection that keeps only the identity,
    # state and summaries; every field is optional and additional properties
    # stay allowed for that reason.
    model_config = ConfigDict(extra="allow")

    artifactProjection: ArtifactProjection = None  # type: ignore[assignment]
    summaryTruncated: bool = None  # type: ignore[assignment]


class _AttemptReply(_Reply):
    attemptId: str | None = Field(None, description="The attempt id.")
    state: str | None = Field(None, description="The attempt's state.")


class CatalogReply(_Reply):
    catalogDigest: str = None  # type: ignore[assignment]
    steps: list[Any] = None  # type: ignore[assignment]
    grants: list[Any] = None  # type: ignore[assignment]


class PreviewReply(_Reply):
    previewId: str = None  # type: ignore[assignment]
    planDigest: str = None  # type: ignore[assignment]
    steps: list[Any] = None  # type: ignore[assignment]
    allGranted: bool = None  # type: ignore[assignment]
    artifactId: str | None = None


class StatusReply(_Reply):
    controller: dict[str, Any] = None  # type: ignore[assignment]
    attempt: dict[str, Any] | None = None


class RunStepReply(_AttemptReply):
    operation: dict[str, Any] = None  # type: ignore[assignment]
    result: Any = None


class VerifyReply(_AttemptReply):
    passed: bool = None  # type: ignore[assignment]
    checks: list[Any] = None  # type: ignore[assignment]


class ReconcileReply(_AttemptReply):
    reconciled: list[Any] = None  # type: ignore[assignment]


class CompleteReply(_AttemptReply):
    proofDigest: str = None  # type: ignore[assignment]


ARTIFACT_READ_TITLE = "Read a work artifact"
ARTIFACT_READ_DESCRIPTION = (
    "Read part of an artifact of the work profile by its id: output of the selected attempt's steps and "
    "verifiers, its large reads and over-budget replies, and your saved previews (the ids of_work_* replies "
    "return next to readWith: \"of_work_artifact_read\"). Not the general artifact store (of_artifact_read). "
    "Returns at most 16384 bytes as base64 from `offset`, with `total_size`, `sha256` and `eof`; call again with "
    "offset += length until eof. Ids of other attempts read as unknown."
)
READ_WITH = "of_work_artifact_read"


def _obj(props: dict[str, Any] | None = None) -> dict[str, Any]:
    """A closed input schema of optional properties."""
    return {"type": "object", "properties": props or {}, "additionalProperties": False}


def _id(description: str) -> dict[str, Any]:
    return {"type": "string", "pattern": ID_PATTERN, "description": description}


def read_only(*, idempotent: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """The capability and MCP annotations of a read-only tool (one place for all of them)."""
    return (
        {"effect": "read", "parallel_safe": True, "idempotent": idempotent},
        {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": idempotent, "open_world_hint": False},
    )


def effectful(effect: str, *, destructive: bool = False, idempotent: bool = False, tasks: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """The capability and MCP annotations of a tool that changes something (``tasks``: may answer as an MCP task)."""
    cap: dict[str, Any] = {"effect": effect}
    if tasks:
        cap["task_support"] = "optional"
    return cap, {"read_only_hint": False, "destructive_hint": destructive, "idempotent_hint": idempotent,
                 "open_world_hint": effect == "external"}


@dataclass(frozen=True)
class ToolRow:
    """One row of the ``of_work_*`` table: everything but the handler, which is ``WorkTools._<name>``."""

    name: str
    title: str
    description: str
    input: dict[str, Any] | None  # None: built from the catalog (preview, run_step)
    output: type[BaseModel]
    kind: tuple[dict[str, Any], dict[str, Any]]  # (capability, annotations)

    @property
    def method(self) -> str:
        return "_" + self.name.removeprefix("of_work_")


TOOLS: tuple[ToolRow, ...] = (
    ToolRow(
        "of_work_catalog", "Work catalog",
        "List the operator's catalog: the steps you may put in a plan (each with its parameter schema, "
        "effect and whether it is a verifier) and the grants that let you run them. Read-only.",
        _obj(), CatalogReply, read_only(),
    ),
    ToolRow(
        "of_work_preview", "Preview a work plan",
        "Check a plan (a list of catalog steps with their parameters) and describe what it would run: "
        "the exact argv or paths, effects, grant coverage and workspace fingerprints. Runs nothing. "
        "The preview is saved; start it with of_work_start(previewId).",
        None, PreviewReply, read_only(idempotent=False),
    ),
    ToolRow(
        "of_work_start", "Start a work attempt",
        "Start an attempt from a saved preview. Only one attempt is active at a time: a second start is "
        "refused and names the active attempt.",
        {**_obj({"previewId": _id("from of_work_preview")}), "required": ["previewId"]},
        _AttemptReply, effectful("write"),
    ),
    ToolRow(
        "of_work_status", "Work attempt status",
        "The selected attempt's state, operations (with their certainty), proof and blocked reason. Read-only.",
        _obj({"attemptId": _id("default: the selected attempt")}), StatusReply, read_only(),
    ),
    ToolRow(
        "of_work_run_step", "Run a plan step",
        "Run the next step of the attempt's plan (or the named one / the plan index given) through the "
        "executor, under the grant and the lease. Long steps report progress and stop when the call is "
        "cancelled; a step whose outcome is uncertain blocks the attempt until of_work_reconcile.",
        # A long step may answer as an MCP task (servers/_tasks.py) for clients that support them.
        None, RunStepReply, effectful("external", destructive=True, tasks=True),
    ),
    ToolRow(
        "of_work_verify", "Verify the attempt",
        "Run the catalog's trusted verifier steps (e.g. the test suite) and re-read the workspace "
        "fingerprints; on success the attempt is 'verified' with a proof bound to the plan, catalog, "
        "environment, fingerprints and mutation epoch. Any later write invalidates the proof.",
        _obj(), VerifyReply, effectful("external", tasks=True),
    ),
    ToolRow(
        "of_work_reconcile", "Reconcile uncertain effects",
        "Resolve operations whose outcome is unknown (e.g. after a crash) by running the step's read-only "
        "oracle: a matching readback resolves them (done or not done); a missing, mismatched or "
        "inconclusive one keeps the attempt blocked. Never re-runs the step. Verify again afterwards.",
        _obj({"operationId": _id("default: every unknown operation")}), ReconcileReply,
        ({"effect": "write"}, effectful("write", idempotent=True)[1]),
    ),
    ToolRow(
        "of_work_complete", "Complete the attempt",
        "Complete a verified attempt. Rechecks the grant, the catalog and the workspace fingerprints and "
        "needs a fresh proof (no write since verification).",
        _obj(), CompleteReply, effectful("write"),
    ),
    ToolRow(
        "of_work_cancel", "Cancel the attempt",
        "Cancel the selected attempt (a terminal state). Effects already made stay on the record.",
        _obj({"reason": {"type": "string", "maxLength": 500}}), _AttemptReply, effectful("write", destructive=True),
    ),
)


class WorkTools:
    """Builds the tools for one controller; keeps the reply projection in one place."""

    def __init__(
        self,
        controller: WorkController | None,
        *,
        store: Any = None,
        budget: int = REPLY_BUDGET,
        principal: str | None = None,
        unavailable: OpenFunctionsError | None = None,
    ) -> None:
        if controller is None and unavailable is None:
            raise ValueError("WorkTools needs a controller, or the reason there is none (unavailable=)")
        self.controller = controller
        self.store = store
        self.budget = budget
        self.default_principal = principal
        # set when the profile has no usable catalog: every tool refuses, naming why
        self.unavailable = unavailable

    def who(self, ctx: ToolExecutionContext) -> str | None:
        """The caller: the trusted context's principal, else the server's configured one."""
        return ctx.principal if ctx.principal is not None else self.default_principal

    async def ready(self, *, refresh: bool = True) -> WorkController:
        """The controller, open; with ``refresh``, the records other replicas appended folded (a shared backend).
        Lifecycle calls pass ``refresh=False``: they fold them once they hold the lease (one read per call).
        Without a usable catalog: the refusal naming why."""
        c = self.controller
        if self.unavailable is not None or c is None:  # __init__ sets one of the two
            raise _refusal(self.unavailable or WorkError("this server has no work controller"))
        try:
            await c.ensure_open()
            if refresh:
                await c.refresh()
        except OpenFunctionsError as exc:
            raise _refusal(exc) from None
        return c

    # -- reply bounding ------------------------------------------------------

    async def reply(self, payload: dict[str, Any], *, scope: str | None) -> dict[str, Any]:
        if self.store is None:
            return payload
        from openfunctions.artifacts import project_reply

        return await project_reply(
            payload, store=self.store, scope=scope, budget=self.budget, summarize=_summarize,
            keep=("attemptId", "previewId", "state", "attempt", "operation", "passed", "proofDigest"),
            read_tool="of_work_artifact_read",
        )

    # -- the tools -------------------------------------------------------------

    def build(self) -> list[ToolDefinition]:
        tools = []
        for row in TOOLS:
            capability, annotations = row.kind
            tools.append(define_tool(
                name=row.name, title=row.title, description=row.description,
                input_schema=row.input if row.input is not None else self._input_schema(row.name),
                output_schema=output_schema(row.output), handler=getattr(self, row.method),
                annotations=annotations, capability=capability, tags=("work",),
            ))
        # of_work_preview: checked in the discriminated form, so an error names the failing field
        tools = [_checked_by(t, self._preview_checked_schema()) if t.name == "of_work_preview" else t for t in tools]
        if self.store is not None:
            from openfunctions.artifacts import create_artifact_read_tool

            tools.append(create_artifact_read_tool(
                self.store, name="of_work_artifact_read", allow=self._allow_artifact, tags=("work",),
                title=ARTIFACT_READ_TITLE, description=ARTIFACT_READ_DESCRIPTION,
            ))
        elif self.unavailable is not None:
            tools.append(self._unavailable_artifact_read())
        return tools

    def _unavailable_artifact_read(self) -> ToolDefinition:
        from openfunctions.artifacts import READ_INPUT_SCHEMA, READ_OUTPUT_SCHEMA

        async def refuse(params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
            await self.ready()
            raise AssertionError("unreachable")

        capability, annotations = read_only()
        return define_tool(
            name="of_work_artifact_read", title=ARTIFACT_READ_TITLE, description=ARTIFACT_READ_DESCRIPTION, input_schema=READ_INPUT_SCHEMA,
            output_schema=READ_OUTPUT_SCHEMA, handler=refuse, annotations=annotations, tags=("work",), capability=capability,
        )

    def _input_schema(self, name: str) -> dict[str, Any]:
        """The input schemas drawn from the catalog (``of_work_preview``, ``of_work_run_step``)."""
        c = self.controller
        if name == "of_work_run_step":
            return _obj({
                "step": {"type": "string", **({"enum": sorted(c.catalog.steps)} if c else {}), "description": "a step of the plan (default: the next one)"},
                "index": {"type": "integer", "minimum": 0, "maximum": MAX_PLAN_STEPS - 1, "description": "a plan index"},
            })
        # of_work_preview, as advertised: strict (every object closed and listing
        # `required`, every node typed), one anyOf branch per step
        return self._plan_schema([
            {"type": "object", "properties": {"step": {"type": "string", "const": name, "description": spec.description[:200]},
                                              "params": self._params(spec)},
             "required": ["step", "params"], "additionalProperties": False}
            for name, spec in self._steps()
        ])

    def _preview_checked_schema(self) -> dict[str, Any]:
        """of_work_preview as checked: the same plans, one item schema with an if/then per step.

        Not an anyOf of steps: a validator then reports the failing field
        itself ("$.plan[0].params.n: \"5; rm\" is not of type \"integer\"",
        "\"rm_rf\" is not one of [...]"), where an anyOf only said "is not
        valid under any of the given schemas". It accepts every plan the
        advertised schema does, and also an item that leaves out ``params``
        (a step without parameters).
        """
        if self.controller is None:  # every call refuses, naming the missing catalog
            return {"type": "object"}
        names = [n for n, _ in self._steps()]
        return self._plan_schema([{
            "type": "object",
            "properties": {"step": {"enum": names, "description": "a step of of_work_catalog"}, "params": {"type": "object"}},
            "required": ["step"],
            "additionalProperties": False,
            "allOf": [
                {"if": {"properties": {"step": {"const": name}}, "required": ["step"]}, "then": {"properties": {"params": self._params(spec)}}}
                for name, spec in self._steps()
            ],
        }])

    def _steps(self) -> list[tuple[str, Any]]:
        c = self.controller
        return sorted(c.catalog.steps.items()) if c is not None else []

    @staticmethod
    def _params(spec: Any) -> dict[str, Any]:
        # optional parameters accept null ("use the default"), as on every tool's top level
        return complete_strict_schema(spec.params_schema)[0]

    def _plan_schema(self, items: list[dict[str, Any]]) -> dict[str, Any]:
        if self.controller is None:
            item: Any = {"type": "object", "properties": {"step": {"type": "string"}, "params": {"type": "object", "properties": {}, "additionalProperties": False, "required": []}},
                         "required": ["step", "params"], "additionalProperties": False}
        else:
            item = items[0] if len(items) == 1 else {"anyOf": items} if items else False
        return {
            "type": "object",
            "properties": {
                "plan": {
                    "type": "array", "minItems": 1, "maxItems": MAX_PLAN_STEPS,
                    "description": "The steps to run, in order: [{step, params}] drawn from of_work_catalog.",
                    "items": item,
                }
            },
            "required": ["plan"],
            "additionalProperties": False,
        }

    # -- handlers ----------------------------------------------------------------

    async def _catalog(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        c = self.controller
        if self.unavailable is not None or c is None:
            raise _refusal(self.unavailable or WorkError("this server has no work controller"))
        grants: list[dict[str, Any]] = []
        if c.authority is not None:
            grants = [g.describe() for g in await c.authority.visible_grants(self.who(ctx))]
        d = c.catalog.describe()
        payload = {"catalogDigest": d["digest"], "workspace": d["workspace"], "steps": d["steps"], "grants": grants, "principal": self.who(ctx)}
        return await self.reply(payload, scope=f"catalog:{self.who(ctx)}")

    async def _preview(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        c = await self.ready(refresh=False)
        payload = await _refusing(c.preview(params["plan"], principal=self.who(ctx)))
        payload["readWith"] = READ_WITH
        return await self.reply(payload, scope=f"preview:{payload['previewId']}")

    async def _start(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        c = await self.ready(refresh=False)
        payload = await _refusing(c.start(params["previewId"], principal=self.who(ctx)))
        return await self.reply(payload, scope=payload["attemptId"])

    async def _status(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        c = await self.ready()
        try:
            payload = c.status(principal=self.who(ctx), attempt_id=params.get("attemptId"))
        except OpenFunctionsError as exc:
            raise _refusal(exc) from None
        att = payload.get("attempt") or {}
        return await self.reply(payload, scope=att.get("attemptId") or f"status:{self.who(ctx)}")

    async def _run_step(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        c = await self.ready(refresh=False)
        payload = await _refusing(c.run_step(principal=self.who(ctx), step=params.get("step"), index=params.get("index"), ctx=ctx))
        payload["readWith"] = READ_WITH
        return await self.reply(payload, scope=payload["attemptId"])

    async def _verify(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        c = await self.ready(refresh=False)
        payload = await _refusing(c.verify(principal=self.who(ctx), ctx=ctx))
        payload["readWith"] = READ_WITH
        return await self.reply(payload, scope=payload["attemptId"])

    async def _reconcile(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        c = await self.ready(refresh=False)
        payload = await _refusing(c.reconcile(principal=self.who(ctx), operation_id=params.get("operationId"), ctx=ctx))
        return await self.reply(payload, scope=payload["attemptId"])

    async def _complete(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        c = await self.ready(refresh=False)
        payload = await _refusing(c.complete(principal=self.who(ctx)))
        return await self.reply(payload, scope=payload["attemptId"])

    async def _cancel(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        c = await self.ready(refresh=False)
        payload = await _refusing(c.cancel(principal=self.who(ctx), reason=params.get("reason")))
        return await self.reply(payload, scope=payload["attemptId"])

    async def _allow_artifact(self, info: Any, ctx: ToolExecutionContext) -> bool:
        """Only the caller's selected attempt's artifacts, its saved previews' and its own reply projections."""
        c = self.controller
        if c is None or not c.opened:
            return False
        who = self.who(ctx)
        scope = getattr(info, "scope", None)
        if isinstance(scope, str) and scope in (f"catalog:{who}", f"status:{who}"):
            return True
        # a shared backend: the preview or attempt may have been recorded through another replica
        await c.refresh()
        return c.may_read_artifact(info.id, scope if isinstance(scope, str) else None, principal=who)


@dataclass(frozen=True, eq=False)
class _CheckedTool(ToolDefinition):
    """A tool whose arguments are checked against an equivalent, better-reporting form of its advertised schema."""

    checked_schema: dict[str, Any] = field(default_factory=dict, compare=False)

    @cached_property
    def input_validator(self) -> Validator:
        return Validator(self.checked_schema, what=f"inputSchema of tool {self.name!r}")


def _checked_by(tool: ToolDefinition, checked: dict[str, Any]) -> ToolDefinition:
    out = _CheckedTool(**{f.name: getattr(tool, f.name) for f in fields(tool)}, checked_schema=checked)
    _ = out.input_validator  # a bad schema fails now
    return out


async def _refusing(coro: Awaitable[dict[str, Any]]) -> dict[str, Any]:
    """Run a controller call; its refusal becomes a ToolError that says whether anything may have run.

    A refusal before anything was dispatched ran nothing (``effect_happened``
    false: the receipt is ``known``); one raised after a step or verifier
    was dispatched (the controller marks it) may follow an effect.
    """
    try:
        return await coro
    except OpenFunctionsError as exc:
        raise _refusal(exc, effect_happened=None if getattr(exc, DISPATCHED_ATTR, False) else False) from None


def _refusal(exc: OpenFunctionsError, *, effect_happened: bool | None = False) -> ToolError:
    msg = exc.message if len(exc.message) <= MAX_ERROR_CHARS else exc.message[: MAX_ERROR_CHARS - 3] + "..."
    details = {k: v for k, v in exc.details.items() if isinstance(v, (str, int, float, bool)) or v is None}
    # A refusal before anything was dispatched is the controller turning the call down:
    # ``rejected``/``known`` (a refused call ran nothing: it is rejected).
    return ToolError(msg, code=exc.code, effect_happened=effect_happened, refused=effect_happened is False,
                     details=details)


def _summarize(payload: dict[str, Any]) -> dict[str, Any]:
    """The over-budget form: identity, state and evidence summaries only."""
    out: dict[str, Any] = {}
    for key in ("attemptId", "previewId", "state", "planDigest", "catalogDigest", "passed", "proofDigest", "cursor", "remaining", "allGranted", "artifactId", "readWith"):
        if key in payload:
            out[key] = payload[key]
    proof = payload.get("proofSummary")
    if isinstance(proof, dict) and "proofDigest" not in out:
        # a verify reply names its proof only inside proofSummary; the digest is what complete is checked against
        out["proofDigest"] = proof.get("proof_digest")
    att = payload.get("attempt")
    if isinstance(att, dict):
        out["attempt"] = {k: att.get(k) for k in ("attemptId", "state", "number", "cursor", "steps", "mutationEpoch", "blockedReason")}
        ops = att.get("operations") or []
        out["attempt"]["operationCount"] = len(ops)
        out["attempt"]["unknownOperations"] = [o["operationId"] for o in ops if o.get("status") == "unknown"][:50]
    if isinstance(payload.get("controller"), dict):
        out["controller"] = payload["controller"]
    op = payload.get("operation")
    if isinstance(op, dict):
        out["operation"] = {k: op.get(k) for k in ("operationId", "step", "status", "receiptId", "outcome", "certainty")}
    if isinstance(payload.get("steps"), list):
        out["stepCount"] = len(payload["steps"])
    if isinstance(payload.get("checks"), list):
        out["checks"] = [{"step": c.get("step"), "passed": c.get("passed"), "exitCode": c.get("exitCode")} for c in payload["checks"][:50]]
    if isinstance(payload.get("reconciled"), list):
        out["reconciled"] = [{k: r.get(k) for k in ("operationId", "verdict", "status", "receiptId")} for r in payload["reconciled"][:50]]
    if "error" in payload:
        out["error"] = payload["error"]
    return out


def create_work_tools(
    controller: WorkController | None,
    *,
    store: Any = None,
    budget: int = REPLY_BUDGET,
    principal: str | None = None,
    unavailable: OpenFunctionsError | None = None,
) -> list[ToolDefinition]:
    """The ``of_work_*`` tools for ``controller`` (``of_work_artifact_read`` only with a ``store``).

    With ``controller=None`` and ``unavailable=<error>`` every tool refuses
    with that error (a profile served before its catalog was written).
    """
    return WorkTools(controller, store=store, budget=budget, principal=principal, unavailable=unavailable).build()


__all__ = ["WorkTools", "create_work_tools", "WORK_TOOL_NAMES", "REPLY_BUDGET", "TOOLS", "ToolRow", "read_only", "effectful", "output_schema"]
