"""``openfunctions-mcp workflows list|show|resume|resolve|prune``: the operator's view of durable runs.

    workflows list [--json] [--data-dir D]
    workflows show RUN_ID [--json] [--data-dir D]
    workflows resume RUN_ID --module PKG.MOD:ATTR [--json] [--data-dir D]
    workflows resume --all --module PKG.MOD:ATTR
    workflows resolve RUN_ID STEP (--applied --result JSON | --not-applied) [--by NAME] [--data-dir D]
    workflows prune [--keep-runs N] [--keep-days D] [--data-dir D]

``list`` and ``show`` read journals without a lock (they work while a run is
running). ``resume`` needs the workflow's code: ``--module`` names a
``Workflow``, a list of them, or a zero-argument function returning either;
each workflow should carry its registry (``pipe(..., registry=...)`` or
``.bind(registry=...)``); ``--module mymod:workflows`` finds ``mymod.py`` in the
current directory, as ``serve --module`` does. ``resolve`` records an operator's answer for an
uncertain step (see docs/WORKFLOWS.md, "Uncertain steps"); ``--applied`` needs ``--result``, the
step's result the run continues with (``--result null`` only if the step really returned null). ``prune`` drops
finished runs past retention now (running and blocked runs always stay).

The data directory defaults, like the server's, to ``$OPENFUNCTIONS_MCP_DATA_DIR``
or else the per-user data dir; runs live in ``<data-dir>/workflows/runs.journal``.
With ``--database URL`` (or, when no ``--data-dir`` is given, ``$OPENFUNCTIONS_DATABASE_URL``)
they live in PostgreSQL instead, rows of one run space (``--space``, default ``default``; refused without a database;
format: ``workflows/_pg_schema.py``; create it with ``openfunctions-mcp db migrate``).
While a server serving durable workflows runs, it holds that journal:
``resume``, ``resolve`` and ``prune`` then exit 2 naming it.
Exit codes: 0 done (``resume``: the run succeeded); 1 the run failed or was
cancelled, or its journal is corrupt; 2 bad usage, unknown run id, a run
blocked or busy, an unloadable module.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import anyio

from openfunctions.core import database_url_from_env, import_spec
from openfunctions.core.errors import OpenFunctionsError

from ._errors import RunCorrupt, WorkflowDefinitionError
from ._runs import KEEP_RUNS, KEEP_SECONDS, RunOutcome, WorkflowRuns, _fold_records
from ._workflow import Workflow

HELP = "list, show and resume durable workflow runs"


def default_data_dir() -> Path:
    from openfunctions.core.files import default_data_dir as _shared_default

    return Path(_shared_default())


def add_commands(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``workflows`` command group to an argparse subparsers object."""
    wf: argparse.ArgumentParser = subparsers.add_parser("workflows", help=HELP, description=__doc__.split("\n\n")[0],
                                                        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = wf.add_subparsers(dest="workflows_command", metavar="{list,show,resume,resolve,prune}")

    def usage(_args: argparse.Namespace) -> int:
        wf.print_help(sys.stderr)
        return 2

    wf.set_defaults(func=usage)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data-dir", dest="workflows_data_dir", type=Path, default=None,
                       help="data directory (default: $OPENFUNCTIONS_MCP_DATA_DIR, else the per-user data dir)")
        p.add_argument("--database", dest="workflows_database", metavar="URL", default=None,
                       help="runs kept in PostgreSQL (postgresql://... or key=value conninfo; schema: `openfunctions-mcp "
                            "db migrate`); default, when no --data-dir: $OPENFUNCTIONS_DATABASE_URL if set")
        p.add_argument("--space", dest="workflows_space", default=None, metavar="NAME",
                       help="with --database: the run space (default: default)")
        p.add_argument("--json", action="store_true", help="machine-readable output")

    p = sub.add_parser("list", help="every run: id, workflow, status, settled steps")
    common(p)
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("show", help="one run: its steps, results, errors and uncertain steps")
    p.add_argument("run_id")
    common(p)
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("resume", help="resume an interrupted run after its last settled step")
    p.add_argument("run_id", nargs="?")
    p.add_argument("--all", action="store_true", help="resume every interrupted run of the loaded workflows")
    p.add_argument("--module", action="append", default=[], metavar="PKG.MOD:ATTR", required=True,
                   help="where the workflows are defined: a Workflow, a list of them, or a zero-arg function returning "
                        "either (repeatable)")
    common(p)
    p.set_defaults(func=_cmd_resume)

    p = sub.add_parser("resolve", help="answer for an uncertain step: did its effect happen?")
    p.add_argument("run_id")
    p.add_argument("step", help="the step's path, as `workflows show` lists it (e.g. 2 or 3.1.0)")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--applied", action="store_true", help="the effect happened; the run continues after the step")
    g.add_argument("--not-applied", action="store_true", help="it did not happen; the step runs again on resume")
    p.add_argument("--result", default=None, metavar="JSON",
                   help="with --applied (required): the step's result as JSON, what the next step receives")
    p.add_argument("--by", default=None, help="who resolves it (default: the OS user)")
    common(p)
    p.set_defaults(func=_cmd_resolve)

    p = sub.add_parser("prune", help="drop finished runs past retention now (running and blocked runs stay)")
    p.add_argument("--keep-runs", type=int, default=KEEP_RUNS, metavar="N",
                   help="keep the newest N finished runs (default: %(default)s)")
    p.add_argument("--keep-days", type=float, default=KEEP_SECONDS / 86400, metavar="D",
                   help="drop finished runs older than D days (default: %(default)s)")
    common(p)
    p.set_defaults(func=_cmd_prune)
    return wf


def _cmd_prune(args: argparse.Namespace) -> int:
    try:
        runs = _runs(args, keep_runs=args.keep_runs, keep_seconds=args.keep_days * 86400)
        done = anyio.run(runs.prune)
    except OpenFunctionsError as exc:
        return _fail(args, exc)
    if args.json:
        print(json.dumps(done, sort_keys=True))
    else:
        print(f"kept {done['kept']} run(s), dropped {done['pruned']} finished run(s) past retention")
    return 0


def _runs(args: argparse.Namespace, workflows: list[Workflow] = (), **options: Any) -> WorkflowRuns:  # type: ignore[assignment]
    """Runs in ``--data-dir``; else in ``--database`` (or ``$OPENFUNCTIONS_DATABASE_URL``); else in the default data dir."""
    if args.workflows_data_dir is not None and args.workflows_database:
        raise WorkflowDefinitionError("give --data-dir or --database, not both")
    url = None if args.workflows_data_dir is not None else (
        args.workflows_database or database_url_from_env())
    if url is not None:
        return WorkflowRuns(database=url, space=args.workflows_space or "default", workflows=workflows, **options)
    if args.workflows_space is not None:  # a data dir holds one set of runs: a space would be silently ignored
        raise WorkflowDefinitionError("--space needs --database (or $OPENFUNCTIONS_DATABASE_URL without --data-dir): "
                                      "runs in a data directory have no spaces")
    return WorkflowRuns(args.workflows_data_dir or default_data_dir(), workflows=workflows, **options)


def check_run_records(where: str, records: list[Any]) -> None:
    """Fold a database run space's rows as ``WorkflowRuns`` does; raises :class:`RunCorrupt` naming the first
    record that does not fold. ``openfunctions-mcp db verify`` runs it on every space (the store, below this
    package, gets it from the command line: servers/cli.py)."""
    _fold_records(where, records)


def _fail(args: argparse.Namespace, exc: OpenFunctionsError) -> int:
    if getattr(args, "json", False):
        print(json.dumps({"ok": False, "error": exc.to_dict()}, sort_keys=True))
    else:
        print(f"openfunctions-mcp workflows: {exc.message}", file=sys.stderr)
    return 1 if isinstance(exc, RunCorrupt) else 2


def _cmd_list(args: argparse.Namespace) -> int:
    try:
        rows = _runs(args).list()
    except OpenFunctionsError as exc:
        return _fail(args, exc)
    if args.json:
        print(json.dumps(rows, sort_keys=True))
        return 0
    if not rows:
        print("no workflow runs")
        return 0
    for r in rows:
        extra = f"  uncertain={','.join(r['uncertain'])}" if r.get("uncertain") else ""
        print(f"{r['run_id']}  {r['status']:<9}  workflow={r['workflow']}  settled={r['steps_settled']}  "
              f"started={r['started_at']}  updated={r['updated_at']}{extra}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    try:
        state = _runs(args).show(args.run_id)
    except OpenFunctionsError as exc:
        return _fail(args, exc)
    d = state.to_dict()
    if args.json:
        print(json.dumps(d, sort_keys=True))
        return 0
    print(f"run       {d['run_id']}")
    print(f"workflow  {d['workflow']} ({d['digest']})")
    print(f"status    {d['status']}  started {d['started_at']}  updated {d['updated_at']}")
    print(f"input     {json.dumps(d['input'], sort_keys=True)[:500]}")
    for s in d["steps"]:
        tail = json.dumps(s.get("result"), sort_keys=True) if s["status"] == "succeeded" else (s.get("error") or {}).get("message", "")
        mark = "  UNCERTAIN" if s.get("uncertain") else ""
        print(f"  step {s['step']:<10} {s['status']:<10} {s['name']}{mark}  {str(tail)[:200]}")
    if d["status"] == "succeeded":
        print(f"result    {json.dumps(d['result'], sort_keys=True)[:1000]}")
    if d.get("error"):
        print(f"error     {d['error'].get('code')}: {d['error'].get('message')}")
    if d["uncertain"]:
        print(f"blocked   step(s) {', '.join(d['uncertain'])} have an uncertain effect (if no process runs this run); "
              f"resolve with `openfunctions-mcp workflows resolve {d['run_id']} STEP --applied|--not-applied`")
    return 0


def load_workflows(spec: str) -> list[Workflow]:
    """The workflows ``PKG.MOD:ATTR`` names (ATTR defaults to ``workflows``)."""
    obj = import_spec(spec, default_attr="workflows", error=WorkflowDefinitionError, from_cwd=True)
    if callable(obj) and not isinstance(obj, Workflow):
        obj = obj()
    items = [obj] if isinstance(obj, Workflow) else list(obj) if isinstance(obj, (list, tuple)) else None
    if items is None or not all(isinstance(w, Workflow) for w in items):
        raise WorkflowDefinitionError(f"--module {spec!r}: expected a Workflow or a list of Workflows, got {type(obj).__name__}")
    return items


def _print_outcome(args: argparse.Namespace, o: RunOutcome) -> None:
    if args.json:
        print(json.dumps(o.to_dict(), sort_keys=True))
    elif o.ok:
        print(f"{o.run_id} succeeded: {json.dumps(o.result, sort_keys=True)[:1000]}")
    else:
        print(f"{o.run_id} {o.status}: {(o.error or {}).get('code')}: {(o.error or {}).get('message')}")


def _cmd_resume(args: argparse.Namespace) -> int:
    if bool(args.run_id) == bool(args.all):
        print("openfunctions-mcp workflows resume: give a RUN_ID or --all", file=sys.stderr)
        return 2
    try:
        workflows = [w for spec in args.module for w in load_workflows(spec)]
        runs = _runs(args, workflows)
        if args.all:
            results = anyio.run(runs.resume_interrupted)
            worst = 0
            for r in results:
                if isinstance(r, RunOutcome):
                    _print_outcome(args, r)
                    worst = max(worst, 0 if r.ok else 1)
                else:
                    worst = max(worst, _fail(args, r))
            if not results and not args.json:
                print("no interrupted runs of the loaded workflows")
            return worst
        outcome = anyio.run(lambda: runs.resume(args.run_id))
    except OpenFunctionsError as exc:
        return _fail(args, exc)
    _print_outcome(args, outcome)
    return 0 if outcome.ok else 1


def _cmd_resolve(args: argparse.Namespace) -> int:
    if args.not_applied and args.result is not None:
        print("openfunctions-mcp workflows resolve: --result goes with --applied only", file=sys.stderr)
        return 2
    if args.applied and args.result is None:
        # No default: a guessed null would be recorded as the step's result and fail the steps after it.
        print("openfunctions-mcp workflows resolve: --applied needs --result JSON, the step's result the run "
              f"continues with (see `openfunctions-mcp workflows show {args.run_id}` for what the step does; "
              "pass --result null only if the step really returned null)", file=sys.stderr)
        return 2
    try:
        result = json.loads(args.result) if args.applied else None
    except ValueError as exc:
        print(f"openfunctions-mcp workflows resolve: --result is not JSON: {exc}", file=sys.stderr)
        return 2
    by = args.by or _os_user()
    try:
        state = anyio.run(lambda: _runs(args).resolve(args.run_id, args.step, applied=bool(args.applied), result=result, by=by))
    except OpenFunctionsError as exc:
        return _fail(args, exc)
    if args.json:
        print(json.dumps(state.to_dict(), sort_keys=True))
    else:
        left = state.uncertain_steps()
        print(f"step {args.step} of run {args.run_id} resolved as {'applied' if args.applied else 'not applied'} by {by}; "
              + (f"still uncertain: {', '.join(left)}" if left else f"resume it with `openfunctions-mcp workflows resume {args.run_id} --module ...`"))
    return 0


def _os_user() -> str:
    try:
        import getpass

        return getpass.getuser()
    except Exception:  # no user name in this environment
        return "operator"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="openfunctions-mcp")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["workflows", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["HELP", "add_commands", "check_run_records", "default_data_dir", "load_workflows", "main"]
