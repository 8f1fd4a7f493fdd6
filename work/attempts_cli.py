"""``openfunctions-mcp work ...``: the operator's view of work attempts and their uncertain operations.

    work list-uncertain [--data-dir D | --database URL] [--json]
    work resolve OP_ID --as applied|not-applied --reason TEXT [--by NAME] [--data-dir D | --database URL]
    work show ATTEMPT_ID [--data-dir D | --database URL]

All three read the attempt journal lock-free (a server may be running).
``resolve`` appends to the operator's inbox ``<data-dir>/work/resolutions.journal``
(see :mod:`openfunctions.work._resolutions`); the server copies it into its
attempt journal at its next work call (or at start-up), and from then on a
plan that runs the operation's step is no longer refused. ``resolve``
refuses while a process of the operation's command is still running.
With ``--database URL`` (default ``$OPENFUNCTIONS_DATABASE_URL``) they read the
attempt records of the work space replicas share in PostgreSQL and write its
inbox there (``serve --database``); the process check then only sees this
machine's processes (run it on the machine of the replica that ran the step).
Exit codes: 0 done, 1 refused (e.g. still running), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio

from openfunctions.core import database_url_from_env

from .cli import default_data_dir

HELP = "resolve and inspect uncertain work operations"


def add_commands(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``work`` command (``list-uncertain``, ``resolve``, ``show``) to ``subparsers``."""
    work: argparse.ArgumentParser = subparsers.add_parser("work", help=HELP, description=__doc__.split("\n\n")[0])
    sub = work.add_subparsers(dest="work_command", metavar="{list-uncertain,resolve,show}")
    sub.required = True

    def data_dir_opt(p: argparse.ArgumentParser) -> None:

        p.add_argument("--data-dir", dest="work_data_dir", default=None, help="data directory (default: per-user data dir)")
        p.add_argument("--database", dest="work_database", metavar="URL", default=database_url_from_env(),
                       help="the work space server replicas share in this PostgreSQL (default: $OPENFUNCTIONS_DATABASE_URL; "
                            "else the data directory)")

    lst = sub.add_parser("list-uncertain", help="list operations whose outcome is unknown and not yet resolved")
    lst.add_argument("--json", action="store_true", help="print JSON (one array)")
    data_dir_opt(lst)
    lst.set_defaults(func=_cmd_list)

    res = sub.add_parser("resolve", help="record an operator's verdict on an uncertain operation")
    res.add_argument("operation_id", metavar="OP_ID")
    res.add_argument("--as", dest="verdict", required=True, choices=("applied", "not-applied"),
                     help="applied: the effect happened (the step counts as done); not-applied: it did not (it may run again)")
    res.add_argument("--reason", required=True, help="what you checked (journaled with the verdict)")
    res.add_argument("--by", default=None, help="who resolves it (default: the OS user)")
    data_dir_opt(res)
    res.set_defaults(func=_cmd_resolve)

    show = sub.add_parser("show", help="print one attempt in full (state, operations, history) as JSON")
    show.add_argument("attempt_id", metavar="ATTEMPT_ID")
    data_dir_opt(show)
    show.set_defaults(func=_cmd_show)
    return work


def _work_dir(args: argparse.Namespace) -> Path:
    d = getattr(args, "work_data_dir", None)
    return (Path(d) if d else default_data_dir()) / "work"


def _where(args: argparse.Namespace) -> str:
    from .cli import redacted

    return redacted(args.work_database) if getattr(args, "work_database", None) else str(_work_dir(args))


def _load(args: argparse.Namespace) -> tuple[Any, list[tuple[int, dict[str, Any]]]]:
    """``(state, inbox)``: the attempt records folded (by the one fold) and the operator's inbox."""
    from ._recovery import replay

    if getattr(args, "work_database", None):
        from .cli import with_database

        async def read(backend: Any) -> tuple[Any, list[tuple[int, dict[str, Any]]]]:
            records = await backend.attempts.read(0)
            return replay(records, backend.attempts.where), await anyio.to_thread.run_sync(backend.resolutions.read)

        return with_database(args.work_database, read)  # type: ignore[no-any-return]
    from ._backend import FileAttemptLog
    from ._resolutions import ResolutionInbox

    work_dir = _work_dir(args)
    # the attempt log's own reader (core.journal's public read_records per segment); read-only: no directory is made
    log_ = FileAttemptLog(work_dir)
    records = log_.read_sync() if (work_dir / "attempts").is_dir() else []
    return replay(records, log_.where), ResolutionInbox(work_dir).read()


def _state(args: argparse.Namespace) -> Any:
    return _load(args)[0]


def _uncertain(args: argparse.Namespace) -> list[dict[str, Any]]:
    from ._procs import live_processes

    state, inbox = _load(args)
    pending = {d["operation_id"]: (seq, d) for seq, d in inbox if seq not in state.resolved_inbox}
    out = []
    for att in state.attempts.values():
        for op in att.operations.values():
            if op.status != "unknown":
                continue
            row = {
                "operationId": op.operation_id, "attemptId": att.attempt_id, "attemptState": att.state, "step": op.step,
                "effect": op.effect, "idempotent": op.idempotent, "at": op.at, "purpose": op.purpose,
                "reconcilable": bool((op.readback or {}).get("reconcilable")),
                "running": live_processes(op.operation_id, op.process),
            }
            if op.operation_id in pending:
                row["resolutionPending"] = {k: pending[op.operation_id][1].get(k) for k in ("as", "reason", "by", "at")}
            out.append(row)
    return out


def _err(msg: str, code: int) -> int:
    print(f"openfunctions-mcp work: {msg}", file=sys.stderr)
    return code


def _cmd_list(args: argparse.Namespace) -> int:
    from openfunctions.core.errors import OpenFunctionsError

    try:
        rows = _uncertain(args)
    except OpenFunctionsError as exc:
        return _err(exc.message, 1)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no uncertain operations in {_where(args)}")
        return 0
    for r in rows:
        extra = []
        if r["running"]:
            extra.append(f"STILL RUNNING (pids {r['running']})")
        if r.get("resolutionPending"):
            extra.append(f"resolved as {r['resolutionPending']['as']}, not yet applied by the server")
        if r["reconcilable"]:
            extra.append("has a readback: of_work_reconcile can settle it")
        print(f"{r['operationId']}  step={r['step']}  attempt={r['attemptId']} ({r['attemptState']})  at={r['at']}"
              + ("  " + "; ".join(extra) if extra else ""))
    print("\nresolve one with: openfunctions-mcp work resolve OP_ID --as applied|not-applied --reason '...'")
    return 0


class ResolveRefused(Exception):
    """``work resolve`` refused: ``message`` says why, ``exit_code`` is the CLI's (1 refused, 2 bad input)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message, self.exit_code = message, exit_code


def resolve_uncertain(args: argparse.Namespace, operation_id: str, *, verdict: str, reason: str, by: str) -> dict[str, Any]:
    """What ``work resolve`` does, for the CLI and the viewer's resolve button alike: check that ``operation_id``
    is uncertain and none of its processes still runs, then append the operator's answer (``verdict``:
    ``applied`` | ``not_applied``) to the inbox. Returns the inbox record; raises :class:`ResolveRefused`."""
    from openfunctions.core.errors import OpenFunctionsError

    from ._resolutions import ResolutionInbox

    if not reason.strip():
        raise ResolveRefused("--reason must say what you checked", 2)
    try:
        rows = {r["operationId"]: r for r in _uncertain(args)}
    except OpenFunctionsError as exc:
        raise ResolveRefused(exc.message, 1) from None
    row = rows.get(operation_id)
    if row is None:
        raise ResolveRefused(f"no uncertain operation {operation_id[:80]!r} in {_where(args)} "
                             "(see: openfunctions-mcp work list-uncertain)", 2)
    if row["running"]:
        raise ResolveRefused(
            f"operation {operation_id} still has running processes {row['running']}: its effect is not over, so no "
            "verdict can hold yet; wait for them, or cancel the attempt (of_work_cancel kills them), then resolve", 1)
    try:
        if getattr(args, "work_database", None):
            from .cli import with_database

            record: dict[str, Any] = with_database(args.work_database, lambda b: b.resolutions.resolve(
                operation_id, as_=verdict, reason=reason, by=by))
            return record
        inbox = ResolutionInbox(_work_dir(args))
        return anyio.run(lambda: inbox.resolve(operation_id, as_=verdict, reason=reason, by=by))
    except (OpenFunctionsError, ValueError) as exc:
        raise ResolveRefused(getattr(exc, "message", str(exc)), 1) from None


def _cmd_resolve(args: argparse.Namespace) -> int:
    import getpass

    verdict = "applied" if args.verdict == "applied" else "not_applied"
    try:
        by = args.by or getpass.getuser()
    except Exception:
        by = "operator"
    try:
        rec = resolve_uncertain(args, args.operation_id, verdict=verdict, reason=args.reason, by=by)
    except ResolveRefused as exc:
        return _err(exc.message, exc.exit_code)
    print(f"recorded: {args.operation_id} resolved as {verdict} by {by} (inbox seq {rec['seq']}); "
          "the server applies it at its next work call, or when it starts")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from openfunctions.core.errors import OpenFunctionsError

    try:
        state = _state(args)
    except OpenFunctionsError as exc:
        return _err(exc.message, 1)
    att = state.attempts.get(args.attempt_id)
    if att is None:
        return _err(f"no attempt {args.attempt_id[:80]!r} in {_where(args)}", 2)
    out = att.summary()
    out["history"] = att.history
    out["verifications"] = [{k: v.get(k) for k in ("verificationId", "passed", "accepted", "checks", "proofSummary")} for v in att.verifications]
    print(json.dumps(out, indent=2, default=str))
    return 0


__all__ = ["HELP", "ResolveRefused", "add_commands", "resolve_uncertain"]
