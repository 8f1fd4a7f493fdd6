"""``openfunctions-mcp ui``: the run and journal viewer over one data directory (Starlette on uvicorn).

| route | answers |
|---|---|
| ``GET /`` , ``/app.js``, ``/app.css`` | the page (files of this package: no CDN, no build step; no data in them) |
| ``GET /api/summary`` | counts, what needs a person (blocked runs and attempts, uncertain steps, unknown receipts, each with its ``resolve`` command), and ``journal verify`` per stream file |
| ``GET /api/receipts`` | receipts, newest first; filters ``outcome``, ``certainty``, ``tool``, ``principal``, ``since``, ``until``, ``q`` (id contains) |
| ``GET /api/receipts/{id}`` | one receipt, its parent and child receipts, and the runs, steps, operations and tasks that name it |
| ``GET /api/agent-runs`` / ``/{id}`` | agent runs (``status``, ``principal``, ``q``, ``since``, ``until``); one as a tree and a timeline |
| ``GET /api/workflow-runs`` / ``/{id}`` | workflow runs (``status``, ``q``, …); one with its steps, their receipts and resolve commands |
| ``GET /api/attempts`` / ``/{id}`` | work attempts (``status``, ``principal``, ``q``); one with its operations and history |
| ``GET /api/tasks`` | MCP tasks (``status``, ``tool``, ``principal``, ``q``) |
| ``GET /api/conversations`` | chat conversations (``principal``, ``q``) |
| ``GET /api/artifacts/{id}`` | the first 16 KiB of an artifact (e.g. a task's large result), read through the artifact store's verified read |
| ``GET /api/events`` | ``text/event-stream``: a ``changed`` event (``{"paths": [...]}``) whenever a stream file grows |
| ``POST /api/resolve`` | with ``--allow-resolve`` only: answer for an uncertain workflow step or work operation, through the code the ``resolve`` commands run (see :meth:`Viewer.resolve`) |
| ``GET /healthz`` | ``{"status": "ok"}`` |

Errors are ``{"error": {"code", "message"}}``: 404 ``ui_not_found`` (no
such record), 503 with the owning package's code when it refuses its records
(a damaged journal: the summary lists it under ``problems`` and still shows
everything else), 400 ``ui_bad_filter`` (a filter value too long), 503
``ui_too_many_watchers`` (more live streams than :data:`MAX_WATCHERS`);
resolving: 403 ``ui_resolve_disabled`` (served without ``--allow-resolve``),
415 ``unsupported_media_type`` (not ``application/json``: a cross-site page
cannot send that without a preflight this server never answers), 400
``ui_resolve_invalid`` (the body names no uncertain step or operation properly),
409 with the owning package's code (e.g. ``not_uncertain``) or
``ui_resolve_refused`` when the resolve code refuses (the CLI's message).

Security: the same outermost guard as the MCP HTTP server
(``servers._http_guard.RequestGuard``: framing, exact ``Host``/``Origin``
rules, loopback by default) and, with a token, its bearer check
(``core.BearerAuth``) on every ``/api/`` route; the page reads the token
from its URL fragment (``/#token=...``, which browsers never send).
Everything the page shows is record data inserted as text, never as HTML,
under a ``Content-Security-Policy`` that allows only this origin's script.
"""

from __future__ import annotations

import json
import socket
from importlib.resources import files
from typing import Any

import anyio
import anyio.to_thread
import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from openfunctions.core import OpenFunctionsError

from ._records import MAX_ROWS, DataDir, bounded, bounded_object, read_artifact, resolve_commands

log = structlog.get_logger("openfunctions.ui")

#: How often the live stream looks at the files' sizes (seconds).
POLL_S = 0.25
#: Live streams served at once (each polls the data dir).
MAX_WATCHERS = 16
#: Longest filter value accepted.
MAX_FILTER = 200
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_STATIC = {"/": ("index.html", "text/html; charset=utf-8"), "/app.js": ("app.js", "text/javascript; charset=utf-8"),
           "/app.css": ("app.css", "text/css; charset=utf-8")}


class _Refused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _filters(request: Request) -> dict[str, str]:
    out = {}
    for k, v in request.query_params.items():
        if len(v) > MAX_FILTER:
            raise _Refused(400, "ui_bad_filter", f"filter {k[:40]!r} is longer than {MAX_FILTER} characters")
        if v.strip():
            out[k] = v.strip()
    return out


def _match(row: dict[str, Any], f: dict[str, str], *, ids: tuple[str, ...], when: str,
           fields: dict[str, str]) -> bool:
    """Whether ``row`` passes the filters: each of ``fields`` (filter -> row key) equal, ``q`` a substring of
    one of ``ids``, ``since``/``until`` (ISO 8601 prefixes) around the row's ``when``."""
    for name, key in fields.items():
        if name in f and str(row.get(key)) != f[name]:
            return False
    if "q" in f and not any(f["q"] in str(row.get(k) or "") for k in ids):
        return False
    at = str(row.get(when) or "")
    if "since" in f and at < f["since"]:
        return False
    return not ("until" in f and at[: len(f["until"])] > f["until"])


def _rows(rows: list[dict[str, Any]], f: dict[str, str], when: str, **kw: Any) -> dict[str, Any]:
    kept = [r for r in rows if _match(r, f, when=when, **kw)]
    kept.sort(key=lambda r: str(r.get(when) or ""), reverse=True)
    return {"total": len(rows), "matched": len(kept), "rows": bounded(kept[:MAX_ROWS]),
            "truncated": max(0, len(kept) - MAX_ROWS)}


class Viewer:
    """The JSON the routes answer with, computed from one :class:`DataDir` (runs in a worker thread)."""

    def __init__(self, data: DataDir) -> None:
        self.data = data

    # -- lists -------------------------------------------------------------------

    def receipts(self, f: dict[str, str]) -> dict[str, Any]:
        rows = [{k: v for k, v in r.items()} for r in self.data.receipts().values()]
        return _rows(rows, f, "started_at", ids=("receipt_id", "parent_receipt_id"),
                     fields={"outcome": "outcome", "certainty": "certainty", "tool": "tool", "principal": "principal"})

    def _agent_rows(self) -> list[dict[str, Any]]:
        out = []
        for run in self.data.agent_runs().values():
            row = run.summary()
            row["principal"] = run.started.get("principal")
            row["parent_receipt_id"] = run.started.get("parent_receipt_id")
            row["tool_calls"] = sum(len(r.get("tool_calls") or ()) for r in run.rounds)
            out.append(row)
        return out

    def agent_runs(self, f: dict[str, str]) -> dict[str, Any]:
        return _rows(self._agent_rows(), f, "started_at", ids=("run_id", "parent_run_id", "agent"),
                     fields={"status": "status", "principal": "principal", "agent": "agent"})

    def workflow_runs(self, f: dict[str, str]) -> dict[str, Any]:
        return _rows(self.data.workflow_runs(), f, "started_at", ids=("run_id", "workflow"),
                     fields={"status": "status", "workflow": "workflow"})

    def _attempt_rows(self) -> list[dict[str, Any]]:
        out = []
        for att in self.data.work_state().attempts.values():
            s = att.summary()
            out.append({"attempt_id": s["attemptId"], "status": s["state"], "principal": s["principal"],
                        "steps": s["steps"], "cursor": s["cursor"], "blocked_reason": s["blockedReason"],
                        "operations": len(s["operations"]),
                        "unknown": sum(1 for o in s["operations"] if o["status"] == "unknown"),
                        "created_at": s["createdAt"], "updated_at": s["updatedAt"]})
        return out

    def attempts(self, f: dict[str, str]) -> dict[str, Any]:
        return _rows(self._attempt_rows(), f, "created_at", ids=("attempt_id",),
                     fields={"status": "status", "principal": "principal"})

    def tasks(self, f: dict[str, str]) -> dict[str, Any]:
        rows = [{"task_id": t["task_id"], "status": t["status"], "tool": t["tool"], "principal": t["principal"],
                 "receipt_id": t["receipt_id"], "certainty": t["certainty"], "created_at": t["created_at"],
                 "last_updated_at": t["last_updated_at"], "message": t["message"], "recovered": t["recovered"],
                 "result_artifact": t["result_artifact"], "result_size": t["result_size"], "journal": t["journal"],
                 "result": t["result"], "error": t["error"]} for t in self.data.tasks()]
        return _rows(rows, f, "created_at", ids=("task_id", "receipt_id"),
                     fields={"status": "status", "tool": "tool", "principal": "principal", "certainty": "certainty"})

    def conversations(self, f: dict[str, str]) -> dict[str, Any]:
        return _rows(self.data.conversations(), f, "used_at", ids=("conversation_id", "thread_id", "agent"),
                     fields={"principal": "principal", "agent": "agent"})

    # -- what needs a person -----------------------------------------------------

    def summary(self) -> dict[str, Any]:
        receipts = self.data.receipts()
        agent = self._agent_rows()
        workflows = self.data.workflow_runs()
        attempts = self._attempt_rows()
        tasks = self.data.tasks()
        attention: list[dict[str, Any]] = []
        for w in workflows:
            if w["status"] == "blocked" or w.get("uncertain"):
                run = self.data.workflow_run(w["run_id"])
                for step in run.uncertain_steps():
                    rec = run.steps[step]
                    attention.append({"kind": "workflow_step", "status": w["status"], "run_id": w["run_id"],
                                      "workflow": w["workflow"], "step": step, "name": rec.name, "tool": rec.tool,
                                      "receipt_id": rec.receipt_id, "at": w.get("updated_at"),
                                      "commands": resolve_commands(self.data.place, workflow_run=w["run_id"], step=step)})
        ops = self.data.uncertain_operations()
        op_attempts = {o["attemptId"] for o in ops}
        for o in ops:
            attention.append({"kind": "work_operation", "status": o["attemptState"], "attempt_id": o["attemptId"],
                              "operation_id": o["operationId"], "step": o["step"], "effect": o["effect"], "at": o["at"],
                              "running": o["running"], "resolution_pending": o.get("resolutionPending"),
                              "commands": resolve_commands(self.data.place, operation=o["operationId"])})
        for a in attempts:
            if a["status"] == "blocked" and a["attempt_id"] not in op_attempts:
                attention.append({"kind": "attempt", "status": "blocked", "attempt_id": a["attempt_id"],
                                  "reason": a["blocked_reason"], "at": a["updated_at"], "commands": []})
        named = {x.get("receipt_id") for x in attention}
        for r in receipts.values():
            if r.get("certainty") == "unknown" and r.get("outcome") != "running" and r["receipt_id"] not in named:
                attention.append({"kind": "receipt", "status": r.get("outcome"), "receipt_id": r["receipt_id"],
                                  "tool": r.get("tool"), "at": r.get("finished_at"),
                                  "error": r.get("error"), "commands": []})
        return bounded_object({
            "data_dir": self.data.where,
            "counts": {"receipts": len(receipts), "agent_runs": len(agent), "workflow_runs": len(workflows),
                       "attempts": len(attempts), "tasks": len(tasks), "conversations": len(self.data.conversations())},
            "attention": attention,
            "streams": self.data.verify(),
            "problems": [{"stream": k, "message": v} for k, v in sorted(self.data.problems.items())],
        })

    # -- one record --------------------------------------------------------------

    def receipt(self, rid: str) -> dict[str, Any]:
        receipts = self.data.receipts()
        r = receipts.get(rid)
        if r is None:
            raise _Refused(404, "ui_not_found", f"no receipt {rid[:80]!r} in {self.data.where}")
        children = [receipts[c] for c in self.data.receipt_children().get(rid, ())]
        refs: list[dict[str, Any]] = []
        for run in self.data.agent_runs().values():
            if rid in {c.get("receipt_id") for rd in run.rounds for c in rd.get("tool_calls") or ()} \
                    or run.started.get("parent_receipt_id") == rid:
                refs.append({"kind": "agent_run", "id": run.run_id, "status": run.status})
        for wid, run in self.data.workflow_states().items():
            for s in run.steps.values():
                if s.receipt_id == rid:
                    refs.append({"kind": "workflow_run", "id": wid, "step": s.step, "status": s.status})
        for t in self.data.tasks():
            if t["receipt_id"] == rid:
                refs.append({"kind": "task", "id": t["task_id"], "status": t["status"]})
        for att in self.data.work_state().attempts.values():
            for op in att.operations.values():
                if rid in (op.dispatch_receipt_id, (op.receipt or {}).get("receipt_id")):
                    refs.append({"kind": "attempt", "id": att.attempt_id, "operation": op.operation_id,
                                 "status": op.status})
        return bounded_object({"receipt": r, "parent": receipts.get(r.get("parent_receipt_id") or ""),
                        "children": children, "referenced_by": refs})

    def _receipt_node(self, rid: str | None, receipts: dict[str, Any], runs_by_receipt: dict[str, list[Any]],
                      depth: int, label: str | None = None) -> dict[str, Any]:
        r = receipts.get(rid or "") or {}
        node: dict[str, Any] = {"type": "receipt", "id": rid, "label": label or r.get("tool") or "tool call",
                                "outcome": r.get("outcome", "no receipt" if rid is None else "not in a journal here"),
                                "certainty": r.get("certainty"), "duration_ms": r.get("duration_ms"),
                                "started_at": r.get("started_at"), "finished_at": r.get("finished_at"),
                                "params_sha256": r.get("params_sha256"), "result_sha256": r.get("result_sha256"),
                                "error": r.get("error"), "children": []}
        if rid is None or depth > 8:
            return node
        # the calls a child run made are shown under that run (its rounds), not twice
        in_child_runs = {c.get("receipt_id") for run in runs_by_receipt.get(rid, [])
                         for rd in run.rounds for c in rd.get("tool_calls") or ()}
        for cid in self.data.receipt_children().get(rid, ()):
            if cid not in in_child_runs:
                node["children"].append(self._receipt_node(cid, receipts, runs_by_receipt, depth + 1))
        for child in runs_by_receipt.get(rid, []):
            node["children"].append(self._run_node(child, receipts, runs_by_receipt, depth + 1))
        return node

    def _run_node(self, run: Any, receipts: dict[str, Any], runs_by_receipt: dict[str, list[Any]],
                  depth: int) -> dict[str, Any]:
        f = run.finished or {}
        node: dict[str, Any] = {"type": "run", "id": run.run_id, "label": f"agent {run.agent}", "status": run.status,
                                "started_at": run.started.get("started_at"), "finished_at": f.get("finished_at"),
                                "error": f.get("error"), "children": []}
        if depth > 8:
            return node
        for rd in run.rounds:
            rnode: dict[str, Any] = {"type": "round", "id": f"{run.run_id}#{rd.get('round')}",
                                     "label": f"round {rd.get('round')}", "status": rd.get("stop_reason"),
                                     "text": rd.get("text"), "usage": rd.get("usage"), "children": []}
            for call in rd.get("tool_calls") or ():
                n = self._receipt_node(call.get("receipt_id"), receipts, runs_by_receipt, depth + 1,
                                       label=call.get("name"))
                if call.get("error_code") and n["outcome"] in ("no receipt", "not in a journal here"):
                    n["error"] = {"code": call.get("error_code"), "message": call.get("outcome")}
                rnode["children"].append(n)
            node["children"].append(rnode)
        return node

    def agent_run(self, rid: str) -> dict[str, Any]:
        runs = self.data.agent_runs()
        run = runs.get(rid)
        if run is None:
            raise _Refused(404, "ui_not_found", f"no agent run {rid[:80]!r} in {self.data.where}")
        receipts = self.data.receipts()
        runs_by_receipt: dict[str, list[Any]] = {}
        for other in runs.values():
            parent = other.started.get("parent_receipt_id")
            if parent:
                runs_by_receipt.setdefault(parent, []).append(other)
        tree = self._run_node(run, receipts, runs_by_receipt, 0)
        # delegations recorded only by parent run id (no receipt between them)
        placed = {n["id"] for n in _walk(tree) if n["type"] == "run"}
        for other in runs.values():
            if other.started.get("parent_run_id") == rid and other.run_id not in placed:
                tree["children"].append(self._run_node(other, receipts, runs_by_receipt, 1))
        timeline = []
        for n in _walk(tree):
            if n.get("started_at"):
                timeline.append({"at": n["started_at"], "what": f"{n['label']} started", "type": n["type"],
                                 "id": n["id"]})
            if n.get("finished_at"):
                timeline.append({"at": n["finished_at"], "type": n["type"], "id": n["id"],
                                 "what": f"{n['label']} {n.get('outcome') or n.get('status')}",
                                 "outcome": n.get("outcome") or n.get("status"), "certainty": n.get("certainty"),
                                 "duration_ms": n.get("duration_ms")})
        timeline.sort(key=lambda e: e["at"])
        parent = run.started.get("parent_run_id")
        return bounded_object({"run": run.to_dict(), "summary": run.summary(), "tree": tree, "timeline": timeline,
                        "parent_run_id": parent if parent in runs else None})

    def workflow_run(self, rid: str) -> dict[str, Any]:
        from openfunctions.workflows import InvalidRunId, WorkflowRunNotFound

        try:
            run = self.data.workflow_run(rid)
        except (WorkflowRunNotFound, InvalidRunId):
            raise _Refused(404, "ui_not_found", f"no workflow run {rid[:80]!r} in {self.data.where}") from None
        receipts = self.data.receipts()
        out = run.to_dict()
        uncertain = set(run.uncertain_steps())
        steps = []
        for s in run.steps.values():
            d = s.to_dict()
            d["receipt"] = self._receipt_node(s.receipt_id, receipts, {}, 0, label=s.name) if s.receipt_id else None
            if s.step in uncertain:
                d["commands"] = resolve_commands(self.data.place, workflow_run=rid, step=s.step)
            steps.append(d)
        out["steps"] = steps
        return bounded_object(out)

    def attempt(self, aid: str) -> dict[str, Any]:
        att = self.data.work_state().attempts.get(aid)
        if att is None:
            raise _Refused(404, "ui_not_found", f"no work attempt {aid[:80]!r} in {self.data.where}")
        receipts = self.data.receipts()
        out = att.summary()
        out["history"] = att.history
        for op in out["operations"]:
            op["receipt"] = receipts.get(op.get("receiptId") or "")
            if op["status"] == "unknown":
                op["commands"] = resolve_commands(self.data.place, operation=op["operationId"])
        return bounded_object(out)


    def artifact(self, aid: str) -> dict[str, Any]:
        out = read_artifact(self.data.files_root, aid)
        if out is None:
            raise _Refused(404, "ui_not_found", f"no artifact {aid[:80]!r} in {self.data.where}")
        return out

    def resolve(self, body: dict[str, Any]) -> dict[str, Any]:
        """An operator's answer, from the page: the code ``workflows resolve`` / ``work resolve`` run.

        ``{"kind": "workflow_step", "run_id", "step", "applied": bool, "result"?: JSON, "by"}`` goes to
        ``WorkflowRuns.resolve`` (a ``step_resolved`` record in the run journal);
        ``{"kind": "work_operation", "operation_id", "applied": bool, "reason", "by"}`` to
        ``work.attempts_cli.resolve_uncertain`` (a record in the operator's inbox). ``by`` is recorded as
        ``"<by> via ui"``."""
        import anyio as _anyio

        from openfunctions.core import OpenFunctionsError

        def text(key: str, limit: int) -> str:
            v = body.get(key)
            if not isinstance(v, str) or not v.strip() or len(v) > limit:
                raise _Refused(400, "ui_resolve_invalid", f'"{key}" must be a non-blank string of at most {limit} characters')
            return v.strip()

        applied = body.get("applied")
        if not isinstance(applied, bool):
            raise _Refused(400, "ui_resolve_invalid", '"applied" must be true (the effect happened) or false (it did not)')
        by = text("by", 100) + " via ui"
        try:
            if body.get("kind") == "workflow_step":
                run_id, step = text("run_id", 200), text("step", 200)
                if applied and "result" not in body:
                    raise _Refused(400, "ui_resolve_invalid", 'applied needs "result": the step\'s result the run '
                                   "continues with (null only if the step really returned null)")
                if not applied and "result" in body:
                    raise _Refused(400, "ui_resolve_invalid", '"result" goes with applied only')
                state = _anyio.run(lambda: self.data._workflows().resolve(
                    run_id, step, applied=applied, result=body.get("result"), by=by))
                return {"resolved": True, "kind": "workflow_step", "run": bounded(state.to_dict())}
            if body.get("kind") == "work_operation":
                from openfunctions.work.attempts_cli import ResolveRefused, resolve_uncertain

                op, reason = text("operation_id", 200), body.get("reason")
                if not isinstance(reason, str) or len(reason) > 2000:  # blank: the resolve code's own refusal says so
                    raise _Refused(400, "ui_resolve_invalid", '"reason" must be a string of at most 2000 characters')
                try:
                    rec = resolve_uncertain(self.data._work_args(), op, verdict="applied" if applied else "not_applied", reason=reason, by=by)
                except ResolveRefused as exc:
                    raise _Refused(409 if exc.exit_code == 1 else 400, "ui_resolve_refused", exc.message) from None
                return {"resolved": True, "kind": "work_operation", "record": bounded(rec)}
        except OpenFunctionsError as exc:
            raise _Refused(409, exc.code, exc.message) from None
        raise _Refused(400, "ui_resolve_invalid", '"kind" must be "workflow_step" or "work_operation"')


def _walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    out = [node]
    for c in node.get("children") or ():
        out += _walk(c)
    return out


def create_ui_app(data_dir: Any = None, *, database: str | None = None, space: str = "default", host: str = "127.0.0.1",
                  port: int | None = None, token: str | None = None, allowed_hosts: list[str] | None = None,
                  allowed_origins: list[str] | None = None, allow_resolve: bool = False) -> Any:
    """The ASGI app :func:`serve_ui` runs (see the module docstring): over ``data_dir``, or over the PostgreSQL
    database at ``database`` (``space``: its agent-run and workflow-run space). ``allow_resolve``: the page may
    resolve (data directories only)."""
    from openfunctions.servers._http_guard import DEFAULT_BODY_TIMEOUT, HostRules, RequestGuard, is_loopback_host

    from ._errors import UIConfigError

    if (data_dir is None) == (database is None):
        raise UIConfigError("give a data directory or a database URL (one of them)")
    if database is not None and allow_resolve:
        raise UIConfigError("resolving from the page works on a data directory only: over --database the page "
                            "shows the resolve commands (drop --allow-resolve)")
    if database is not None:
        from ._database import Database

        data: DataDir = Database(database, space=space)
    else:
        data = DataDir(data_dir)
    viewer = Viewer(data)
    static = {path: (files(__package__).joinpath("_static", name).read_bytes(), ctype)
              for path, (name, ctype) in _STATIC.items()}
    watchers = 0

    def page(request: Request) -> Response:
        body, ctype = static[request.url.path]
        return Response(body, media_type=ctype, headers={"cache-control": "no-store", "content-security-policy": _CSP,
                                                         "x-content-type-options": "nosniff",
                                                         "referrer-policy": "no-referrer"})

    def api(fn: Any, *, with_id: bool = False) -> Any:
        async def route(request: Request) -> Response:
            try:
                arg = request.path_params["id"] if with_id else _filters(request)
                result = await anyio.to_thread.run_sync(fn, arg)
            except _Refused as exc:
                return _error(exc.status, exc.code, exc.message)
            except OpenFunctionsError as exc:  # the owning package refused its records (e.g. a damaged journal)
                return _error(503, exc.code, exc.message)
            return JSONResponse(result, headers={"cache-control": "no-store"})
        return route

    async def summary(request: Request) -> Response:
        out = await anyio.to_thread.run_sync(viewer.summary)
        out["resolve"] = allow_resolve
        return JSONResponse(out, headers={"cache-control": "no-store"})

    async def resolve(request: Request) -> Response:
        if not allow_resolve:
            return _error(403, "ui_resolve_disabled", "this viewer is read-only: serve it with --allow-resolve to resolve "
                          "from the page, or run the command shown")
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            return _error(415, "unsupported_media_type", f"send the body as application/json, not {ctype or 'nothing'}")
        try:
            body = json.loads(await request.body())
        except (UnicodeDecodeError, ValueError):
            return _error(400, "ui_resolve_invalid", "the body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "ui_resolve_invalid", "the body must be a JSON object")
        try:
            out = await anyio.to_thread.run_sync(viewer.resolve, body)
        except _Refused as exc:
            return _error(exc.status, exc.code, exc.message)
        log.info("ui_resolved", kind=out["kind"], by=body.get("by"))
        return JSONResponse(out)

    async def events(request: Request) -> Any:
        nonlocal watchers
        if watchers >= MAX_WATCHERS:
            return _error(503, "ui_too_many_watchers", f"{MAX_WATCHERS} live views are open already; close one")
        return _Events(data, _count)

    def _count(delta: int) -> None:
        nonlocal watchers
        watchers += delta

    routes = [Route(path, page, methods=["GET"]) for path in _STATIC]
    routes += [
        Route("/api/summary", summary, methods=["GET"]),
        Route("/api/receipts", api(viewer.receipts), methods=["GET"]),
        Route("/api/receipts/{id}", api(viewer.receipt, with_id=True), methods=["GET"]),
        Route("/api/agent-runs", api(viewer.agent_runs), methods=["GET"]),
        Route("/api/agent-runs/{id}", api(viewer.agent_run, with_id=True), methods=["GET"]),
        Route("/api/workflow-runs", api(viewer.workflow_runs), methods=["GET"]),
        Route("/api/workflow-runs/{id}", api(viewer.workflow_run, with_id=True), methods=["GET"]),
        Route("/api/attempts", api(viewer.attempts), methods=["GET"]),
        Route("/api/attempts/{id}", api(viewer.attempt, with_id=True), methods=["GET"]),
        Route("/api/tasks", api(viewer.tasks), methods=["GET"]),
        Route("/api/conversations", api(viewer.conversations), methods=["GET"]),
        Route("/api/artifacts/{id}", api(viewer.artifact, with_id=True), methods=["GET"]),
        Route("/api/events", events, methods=["GET"]),
        Route("/api/resolve", resolve, methods=["POST"]),
    ]
    app: Any = Starlette(routes=routes)
    if token:
        from openfunctions.core import BearerAuth

        app = _PagesOpen(app, BearerAuth(app, token, "bearer"))
    if allowed_hosts:
        rules: HostRules | None = HostRules.build(list(allowed_hosts), list(allowed_origins or []))
    elif is_loopback_host(host):
        rules = HostRules.loopback()  # a loopback name on any port (tunnels, port forwards); Origin: the same port
    else:
        rules = None  # a token is required there (serve_ui); name --allowed-host to check Host/Origin too

    async def health() -> dict[str, Any]:
        return {"status": "ok"}

    def error_body(code: str, message: str) -> tuple[bytes, bytes]:  # the guard's refusals in this API's shape
        return json.dumps({"error": {"code": code, "message": message}}).encode(), b"application/json"

    return RequestGuard(app, rules=rules, health=health, max_body_bytes=64 * 1024, body_timeout=DEFAULT_BODY_TIMEOUT,
                        error_body=error_body,
                        host_hint="to accept another name, start the viewer with --allowed-host NAME[:PORT] (and a token)")


class _Events:
    """``text/event-stream``: ``changed`` whenever a stream file's size or mtime changes; ends when the client goes."""

    def __init__(self, data: DataDir, count: Any) -> None:
        self.data, self.count = data, count

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.count(1)
        try:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-store"),
                                    (b"x-accel-buffering", b"no")]})
            async with anyio.create_task_group() as tg:
                async def watch() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(watch)
                before = await anyio.to_thread.run_sync(self.data.signature)
                await send({"type": "http.response.body", "body": b"event: ready\ndata: {}\n\n", "more_body": True})
                idle = 0.0
                while True:
                    await anyio.sleep(getattr(self.data, "poll_s", POLL_S))
                    now = await anyio.to_thread.run_sync(self.data.signature)
                    changed = self.data.changed(before, now)
                    before = now
                    if changed:
                        chunk = f"event: changed\ndata: {json.dumps({'paths': changed})}\n\n".encode()
                        idle = 0.0
                    else:
                        idle += POLL_S
                        if idle < 15:
                            continue
                        chunk, idle = b": keep-alive\n\n", 0.0
                    try:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    except OSError:
                        tg.cancel_scope.cancel()
                        return
        finally:
            self.count(-1)


class _PagesOpen:
    """With a token: the page's three files (no data in them) are open; every ``/api/`` route needs the token."""

    def __init__(self, app: Any, guarded: Any) -> None:
        self.app, self.guarded = app, guarded

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("method") == "GET" and scope.get("path") in _STATIC:
            await self.app(scope, receive, send)
        else:
            await self.guarded(scope, receive, send)



async def serve_ui(data_dir: Any = None, *, database: str | None = None, space: str = "default", port: int = 8766,
                   host: str = "127.0.0.1", token: str | None = None, allowed_hosts: list[str] | None = None,
                   allowed_origins: list[str] | None = None, allow_resolve: bool = False, ready: Any = None) -> None:
    """Serve until cancelled. ``port=0`` picks a free port; ``ready(port)`` is called once listening."""
    import uvicorn

    from openfunctions.servers._http_guard import is_loopback_host

    from ._errors import UIConfigError

    if not is_loopback_host(host) and not token:
        raise UIConfigError(f"serving the viewer on {host!r} (not loopback) needs a bearer token: "
                            "--auth-token-env / --auth-token-file, or bind 127.0.0.1")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise UIConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = sock.getsockname()[1]
    try:
        app = create_ui_app(data_dir, database=database, space=space, host=host, port=bound, token=token,
                            allowed_hosts=allowed_hosts, allowed_origins=allowed_origins, allow_resolve=allow_resolve)
    except BaseException:
        sock.close()
        raise
    config = uvicorn.Config(app, host=host, port=bound, log_level=None, access_log=False, lifespan="off",
                            log_config=None, timeout_graceful_shutdown=2)
    server = uvicorn.Server(config)
    stopped = anyio.Event()

    async def run_server() -> None:
        try:
            with anyio.CancelScope(shield=True):
                await server.serve(sockets=[sock])
        finally:
            stopped.set()

    async def announce() -> None:
        while not server.started and not stopped.is_set():
            await anyio.sleep(0.01)
        if server.started and ready is not None:
            ready(bound)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_server)
        tg.start_soon(announce)
        try:
            await stopped.wait()
        finally:
            server.should_exit = True
    sock.close()


__all__ = ["MAX_WATCHERS", "POLL_S", "Viewer", "create_ui_app", "serve_ui"]
