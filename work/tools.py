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

from typing import Any

from openfunctions.core import OpenFunctionsError, ToolDefinition, ToolError, ToolExecutionContext, define_tool

from .controller import DISPATCHED_ATTR, MAX_PLAN_STEPS, WorkController

REPLY_BUDGET = 32 * 1024
MAX_ERROR_CHARS = 4000
ID_PATTERN = "^[a-z]{2,5}_[0-9a-f]{32}$"

WORK_TOOL_NAMES = (
    "of_work_catalog", "of_work_preview", "of_work_start", "of_work_status", "of_work_run_step",
    "of_work_verify", "of_work_reconcile", "of_work_complete", "of_work_cancel", "of_work_artifact_read",
)

_PROJECTION_SCHEMA = {
    "type": "object",
    "description": "Present when the full reply was larger than the 32 KiB budget (or could not be stored).",
    "properties": {
        "available": {"type": "boolean"},
        "artifact_id": {"type": "string"},
        "sha256": {"type": "string"},
        "size": {"type": "integer"},
        "media_type": {"type": "string"},
        "read_with": {"type": "string"},
        "reason": {"type": "string"},
    },
    "required": ["available"],
}


def _out(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    # Replies over budget become a projection that keeps only the identity,
    # state and summaries; additional properties stay allowed for that reason.
    return {
        "type": "object",
        "properties": {**props, "artifactProjection": _PROJECTION_SCHEMA, "summaryTruncated": {"type": "boolean"}},
        "required": list(required),
        "additionalProperties": True,
    }


ARTIFACT_READ_TITLE = "Read a work artifact"
ARTIFACT_READ_DESCRIPTION = (
    "Read part of an artifact of the work profile by its id: output of the selected attempt's steps and "
    "verifiers, its large reads and over-budget replies, and your saved previews (the ids of_work_* replies "
    "return next to readWith: \"of_work_artifact_read\"). Not the general artifact store (of_artifact_read). "
    "Returns at most 16384 bytes as base64 from `offset`, with `total_size`, `sha256` and `eof`; call again with "
    "offset += length until eof. Ids of other attempts read as unknown."
)
READ_WITH = "of_work_artifact_read"

_STATE = {"type": ["string", "null"], "description": "The attempt's state."}
_ATTEMPT = {"type": ["string", "null"], "description": "The attempt id."}
_READ = {"read_only_hint": True, "destructive_hint": False, "idempotent_hint": True, "open_world_hint": False}


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

    async def ready(self) -> None:
        if self.unavailable is not None:
            raise _refusal(self.unavailable)
        try:
            await self.controller.ensure_open()
        except OpenFunctionsError as exc:
            raise _refusal(exc) from None

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
        c = self.controller
        tools = [
            define_tool(
                name="of_work_catalog",
                title="Work catalog",
                description=(
                    "List the operator's catalog: the steps you may put in a plan (each with its parameter schema, "
                    "effect and whether it is a verifier) and the grants that let you run them. Read-only."
                ),
                input_schema={"type": "object", "properties": {}, "additionalProperties": False},
                output_schema=_out({"catalogDigest": {"type": "string"}, "steps": {"type": "array"}, "grants": {"type": "array"}}),
                handler=self._catalog,
                annotations=_READ,
                capability={"effect": "read", "parallel_safe": True, "idempotent": True},
                tags=("work",),
            ),
            define_tool(
                name="of_work_preview",
                title="Preview a work plan",
                description=(
                    "Check a plan (a list of catalog steps with their parameters) and describe what it would run: "
                    "the exact argv or paths, effects, grant coverage and workspace fingerprints. Runs nothing. "
                    "The preview is saved; start it with of_work_start(previewId)."
                ),
                input_schema=self._preview_schema(),
                output_schema=_out(
                    {"previewId": {"type": "string"}, "planDigest": {"type": "string"}, "steps": {"type": "array"},
                     "allGranted": {"type": "boolean"}, "artifactId": {"type": ["string", "null"]}},
                ),
                handler=self._preview,
                annotations={**_READ, "idempotent_hint": False},
                capability={"effect": "read", "parallel_safe": True},
                tags=("work",),
            ),
            define_tool(
                name="of_work_start",
                title="Start a work attempt",
                description=(
                    "Start an attempt from a saved preview. Only one attempt is active at a time: a second start is "
                    "refused and names the active attempt."
                ),
                input_schema={
                    "type": "object",
                    "properties": {"previewId": {"type": "string", "pattern": ID_PATTERN, "description": "from of_work_preview"}},
                    "required": ["previewId"],
                    "additionalProperties": False,
                },
                output_schema=_out({"attemptId": _ATTEMPT, "state": _STATE}),
                handler=self._start,
                annotations={"read_only_hint": False, "destructive_hint": False, "idempotent_hint": False, "open_world_hint": False},
                capability={"effect": "write"},
                tags=("work",),
            ),
            define_tool(
                name="of_work_status",
                title="Work attempt status",
                description="The selected attempt's state, operations (with their certainty), proof and blocked reason. Read-only.",
                input_schema={
                    "type": "object",
                    "properties": {"attemptId": {"type": "string", "pattern": ID_PATTERN, "description": "default: the selected attempt"}},
                    "additionalProperties": False,
                },
                output_schema=_out({"controller": {"type": "object"}, "attempt": {"type": ["object", "null"]}}),
                handler=self._status,
                annotations=_READ,
                capability={"effect": "read", "parallel_safe": True, "idempotent": True},
                tags=("work",),
            ),
            define_tool(
                name="of_work_run_step",
                title="Run a plan step",
                description=(
                    "Run the next step of the attempt's plan (or the named one / the plan index given) through the "
                    "executor, under the grant and the lease. Long steps report progress and stop when the call is "
                    "cancelled; a step whose outcome is uncertain blocks the attempt until of_work_reconcile."
                ),
                input_schema={
                    "type": "object",
                    "properties": {
                        "step": {"type": "string", **({"enum": sorted(c.catalog.steps)} if c else {}), "description": "a step of the plan (default: the next one)"},
                        "index": {"type": "integer", "minimum": 0, "maximum": MAX_PLAN_STEPS - 1, "description": "a plan index"},
                    },
                    "additionalProperties": False,
                },
                output_schema=_out({"attemptId": _ATTEMPT, "state": _STATE, "operation": {"type": "object"}, "result": {}}),
                handler=self._run_step,
                annotations={"read_only_hint": False, "destructive_hint": True, "idempotent_hint": False, "open_world_hint": True},
                # A long step may answer as an MCP task (servers/_tasks.py) for clients that support them.
                capability={"effect": "external", "task_support": "optional"},
                tags=("work",),
            ),
            define_tool(
                name="of_work_verify",
                title="Verify the attempt",
                description=(
                    "Run the catalog's trusted verifier steps (e.g. the test suite) and re-read the workspace "
                    "fingerprints; on success the attempt is 'verified' with a proof bound to the plan, catalog, "
                    "environment, fingerprints and mutation epoch. Any later write invalidates the proof."
                ),
                input_schema={"type": "object", "properties": {}, "additionalProperties": False},
                output_schema=_out({"attemptId": _ATTEMPT, "state": _STATE, "passed": {"type": "boolean"}, "checks": {"type": "array"}}),
                handler=self._verify,
                annotations={"read_only_hint": False, "destructive_hint": False, "idempotent_hint": False, "open_world_hint": True},
                capability={"effect": "external", "task_support": "optional"},
                tags=("work",),
            ),
            define_tool(
                name="of_work_reconcile",
                title="Reconcile uncertain effects",
                description=(
                    "Resolve operations whose outcome is unknown (e.g. after a crash) by running the step's read-only "
                    "oracle: a matching readback resolves them (done or not done); a missing, mismatched or "
                    "inconclusive one keeps the attempt blocked. Never re-runs the step. Verify again afterwards."
                ),
                input_schema={
                    "type": "object",
                    "properties": {"operationId": {"type": "string", "pattern": ID_PATTERN, "description": "default: every unknown operation"}},
                    "additionalProperties": False,
                },
                output_schema=_out({"attemptId": _ATTEMPT, "state": _STATE, "reconciled": {"type": "array"}}),
                handler=self._reconcile,
                annotations={"read_only_hint": False, "destructive_hint": False, "idempotent_hint": True, "open_world_hint": False},
                capability={"effect": "write"},
                tags=("work",),
            ),
            define_tool(
                name="of_work_complete",
                title="Complete the attempt",
                description=(
                    "Complete a verified attempt. Rechecks the grant, the catalog and the workspace fingerprints and "
                    "needs a fresh proof (no write since verification)."
                ),
                input_schema={"type": "object", "properties": {}, "additionalProperties": False},
                output_schema=_out({"attemptId": _ATTEMPT, "state": _STATE, "proofDigest": {"type": "string"}}),
                handler=self._complete,
                annotations={"read_only_hint": False, "destructive_hint": False, "idempotent_hint": False, "open_world_hint": False},
                capability={"effect": "write"},
                tags=("work",),
            ),
            define_tool(
                name="of_work_cancel",
                title="Cancel the attempt",
                description="Cancel the selected attempt (a terminal state). Effects already made stay on the record.",
                input_schema={
                    "type": "object",
                    "properties": {"reason": {"type": "string", "maxLength": 500}},
                    "additionalProperties": False,
                },
                output_schema=_out({"attemptId": _ATTEMPT, "state": _STATE}),
                handler=self._cancel,
                annotations={"read_only_hint": False, "destructive_hint": True, "idempotent_hint": False, "open_world_hint": False},
                capability={"effect": "write"},
                tags=("work",),
            ),
        ]
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

        return define_tool(
            name="of_work_artifact_read", title=ARTIFACT_READ_TITLE, description=ARTIFACT_READ_DESCRIPTION, input_schema=READ_INPUT_SCHEMA,
            output_schema=READ_OUTPUT_SCHEMA, handler=refuse, annotations=_READ, tags=("work",),
            capability={"effect": "read", "parallel_safe": True, "idempotent": True},
        )

    def _preview_schema(self) -> dict[str, Any]:
        c = self.controller
        if c is None:
            items: Any = {"type": "object", "properties": {"step": {"type": "string"}, "params": {"type": "object"}}, "required": ["step"]}
            return {"type": "object", "properties": {"plan": {"type": "array", "minItems": 1, "items": items}}, "required": ["plan"]}
        # One item schema with an if/then per step (not an anyOf of steps): a
        # validator then reports the failing field itself ("$.plan[0].params.n:
        # '5; rm' is not of type 'integer'", "'rm_rf' is not one of [...]"),
        # where an anyOf only said "is not valid under any of the given schemas".
        names = sorted(c.catalog.steps)
        item: dict[str, Any] = {
            "type": "object",
            "properties": {
                "step": {"enum": names, "description": "a step of of_work_catalog"},
                "params": {"type": "object", "description": "the step's parameters (its params schema in of_work_catalog)"},
            },
            "required": ["step"],
            "additionalProperties": False,
            "allOf": [
                {"if": {"properties": {"step": {"const": name}}, "required": ["step"]},
                 "then": {"properties": {"params": spec.params_schema}}}
                for name, spec in sorted(c.catalog.steps.items())
            ],
        }
        alternatives = names
        return {
            "type": "object",
            "properties": {
                "plan": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_PLAN_STEPS,
                    "description": "The steps to run, in order: [{step, params}] drawn from of_work_catalog.",
                    "items": item if alternatives else False,
                }
            },
            "required": ["plan"],
            "additionalProperties": False,
        }

    # -- handlers ----------------------------------------------------------------

    async def _catalog(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        if self.unavailable is not None:
            raise _refusal(self.unavailable)
        c = self.controller
        grants: list[dict[str, Any]] = []
        if c.authority is not None:
            grants = [g.describe() for g in await c.authority.visible_grants(self.who(ctx))]
        d = c.catalog.describe()
        payload = {"catalogDigest": d["digest"], "workspace": d["workspace"], "steps": d["steps"], "grants": grants, "principal": self.who(ctx)}
        return await self.reply(payload, scope=f"catalog:{self.who(ctx)}")

    async def _preview(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        await self.ready()
        payload = await _refusing(self.controller.preview(params["plan"], principal=self.who(ctx)))
        payload["readWith"] = READ_WITH
        return await self.reply(payload, scope=f"preview:{payload['previewId']}")

    async def _start(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        await self.ready()
        payload = await _refusing(self.controller.start(params["previewId"], principal=self.who(ctx)))
        return await self.reply(payload, scope=payload["attemptId"])

    async def _status(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        await self.ready()
        try:
            payload = self.controller.status(principal=self.who(ctx), attempt_id=params.get("attemptId"))
        except OpenFunctionsError as exc:
            raise _refusal(exc) from None
        att = payload.get("attempt") or {}
        return await self.reply(payload, scope=att.get("attemptId") or f"status:{self.who(ctx)}")

    async def _run_step(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        await self.ready()
        payload = await _refusing(self.controller.run_step(principal=self.who(ctx), step=params.get("step"), index=params.get("index"), ctx=ctx))
        payload["readWith"] = READ_WITH
        return await self.reply(payload, scope=payload["attemptId"])

    async def _verify(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        await self.ready()
        payload = await _refusing(self.controller.verify(principal=self.who(ctx), ctx=ctx))
        payload["readWith"] = READ_WITH
        return await self.reply(payload, scope=payload["attemptId"])

    async def _reconcile(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        await self.ready()
        payload = await _refusing(self.controller.reconcile(principal=self.who(ctx), operation_id=params.get("operationId"), ctx=ctx))
        return await self.reply(payload, scope=payload["attemptId"])

    async def _complete(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        await self.ready()
        payload = await _refusing(self.controller.complete(principal=self.who(ctx)))
        return await self.reply(payload, scope=payload["attemptId"])

    async def _cancel(self, params: dict[str, Any], ctx: ToolExecutionContext) -> dict[str, Any]:
        await self.ready()
        payload = await _refusing(self.controller.cancel(principal=self.who(ctx), reason=params.get("reason")))
        return await self.reply(payload, scope=payload["attemptId"])

    def _allow_artifact(self, info: Any, ctx: ToolExecutionContext) -> bool:
        """Only the caller's selected attempt's artifacts, its saved previews' and its own reply projections."""
        c = self.controller
        if c is None or not c.opened:
            return False
        who = self.who(ctx)
        scope = getattr(info, "scope", None)
        if isinstance(scope, str) and scope in (f"catalog:{who}", f"status:{who}"):
            return True
        return c.may_read_artifact(info.id, scope if isinstance(scope, str) else None, principal=who)


async def _refusing(coro: Any) -> dict[str, Any]:
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
    return ToolError(msg, code=exc.code, effect_happened=effect_happened, details=details)


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


def build_work_tools(
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


__all__ = ["WorkTools", "build_work_tools", "WORK_TOOL_NAMES", "REPLY_BUDGET"]
