"""``openfunctions-mcp runs list|show|tail``: read agent run records (read-only, no lock taken).

- ``runs list [--agent NAME] [--status S] [-n N] [--json]``: newest last, one line per run.
- ``runs show RUN_ID [--json]``: the whole record (start, every round, the end, claims).
- ``runs tail [-n N] [-f] [--json]``: the last N run records as written; ``-f`` keeps
  printing new ones as servers write them (polling every 0.5 s; Ctrl-C stops).
- ``runs verify RUN_ID CLAIM_ID (--receipt RECEIPT_ID | --proof FILE) [--covers R ...] [--by WHO]``:
  link evidence to a claim (a ``claim_verified`` record): a verifier call's receipt, found in the
  data dir's execution journals (it must have succeeded), or a work proof (JSON, as
  ``of_work_verify`` returns it under ``proof``).
- ``runs fulfil RUN_ID [--reason TEXT] [--by WHO]``: mark the run's task fulfilled (a
  ``task_fulfilled`` record): only when every claim is verified, or with a reason.

``verify`` and ``fulfil`` write: they open the first free run journal slot of the data dir
(a running server keeps its own; ``runs show`` folds every slot). They do not write to
``--database`` (use the Python API, :func:`openfunctions.agents.verify_claim`, on a
:class:`DatabaseRunLog`).

``--data-dir`` defaults to the per-user data dir (``$OPENFUNCTIONS_MCP_DATA_DIR``
overrides it), as ``serve`` uses. With ``--database URL`` (default without ``--data-dir``:
``$OPENFUNCTIONS_DATABASE_URL``, as ``serve``) ``list``, ``show`` and ``tail`` read the runs that
``serve --database`` replicas keep in PostgreSQL instead (``tail -f`` follows every replica's records). Exit codes: 0 ok; 1 a run id not found; 2 the
journal cannot be read (corrupt, unsafe path), or (verify, fulfil) the evidence or the
claims do not allow the record (its error code is printed).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
from pathlib import Path
from typing import Any

from openfunctions.core import OpenFunctionsError, database_url_from_env
from openfunctions.core.journal import read_records

from ._runlog import journal_files, read_runs

#: A reader on the command line waits this long for the database, not the servers' 10 s (it retries nothing).
CLI_CONNECT_TIMEOUT_S = 3.0


def _default_data_dir() -> Path:
    from openfunctions.core.files import default_data_dir as _shared_default

    return Path(_shared_default())


def add_commands(subparsers: Any) -> None:
    """Add the ``runs`` command group to an argparse subparsers object."""
    r = subparsers.add_parser("runs", help="list, show and follow agent run records",
                              description="Read agent run records (read-only; works while a server writes).")
    rsub = r.add_subparsers(dest="runs_command", metavar="{list,show,tail,verify,fulfil}")
    r.set_defaults(func=lambda args: (r.print_help(sys.stderr), 2)[1])

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data-dir", dest="runs_data_dir", type=Path, default=None, metavar="DIR",
                       help="data directory (default: the per-user data dir)")
        p.add_argument("--json", action="store_true", help="machine-readable output")

    def database(p: argparse.ArgumentParser) -> None:
        p.add_argument("--database", dest="runs_database", metavar="URL", default=None,
                       help="read the runs serve --database keeps in PostgreSQL (default without --data-dir: "
                            "$OPENFUNCTIONS_DATABASE_URL, if set)")

    p = rsub.add_parser("list", help="one line per run: id, agent, status, rounds, model, started")
    p.add_argument("--agent", help="only runs of this agent")
    p.add_argument("--status", help="only runs with this status (running, completed, max_rounds, cancelled, failed, timeout, interrupted)")
    p.add_argument("-n", type=_count, default=50, metavar="N", help="at most the last N runs (default 50)")
    common(p)
    database(p)
    p.set_defaults(func=cmd_list)

    p = rsub.add_parser("show", help="one run's whole record")
    p.add_argument("run_id")
    common(p)
    database(p)
    p.set_defaults(func=cmd_show)

    p = rsub.add_parser("verify", help="link evidence (a verifier's receipt, a work proof) to a run's claim")
    p.add_argument("run_id")
    p.add_argument("claim_id")
    ev = p.add_mutually_exclusive_group(required=True)
    ev.add_argument("--receipt", metavar="RECEIPT_ID", help="a verifier call's receipt id (it must have succeeded)")
    ev.add_argument("--proof", type=Path, metavar="FILE", help="a work proof as JSON (of_work_verify's proof)")
    p.add_argument("--covers", nargs="+", metavar="RECEIPT_ID", default=None,
                   help="the run's calls this evidence verifies (default: every call the claim awaits)")
    p.add_argument("--by", default=None, help="who verifies (recorded)")
    common(p)
    p.set_defaults(func=cmd_verify)

    p = rsub.add_parser("fulfil", help="mark a run's task fulfilled (every claim verified, or --reason)")
    p.add_argument("run_id")
    p.add_argument("--reason", default=None, help="fulfil without verified claims, for this reason (recorded)")
    p.add_argument("--by", default=None, help="who fulfils (recorded)")
    common(p)
    p.set_defaults(func=cmd_fulfil)

    p = rsub.add_parser("tail", help="the last N run records as written (-f: keep following)")
    p.add_argument("-n", type=_count, default=10, metavar="N", help="how many records (default 10)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new records (poll every 0.5 s; Ctrl-C stops)")
    common(p)
    database(p)
    p.set_defaults(func=cmd_tail)


def _dir(args: argparse.Namespace) -> Path:
    return (args.runs_data_dir or _default_data_dir()).expanduser()


def _count(text: str) -> int:
    """``-n``: a whole number >= 0 (a negative one used to print nothing, silently)."""
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return n


def _fail(exc: OpenFunctionsError) -> int:
    print(f"openfunctions-mcp runs: {exc.message}", file=sys.stderr)
    return 2


def _database(args: argparse.Namespace) -> str | None:
    """``--database``; else, unless ``--data-dir`` was given, ``$OPENFUNCTIONS_DATABASE_URL`` (as ``serve``)."""
    if getattr(args, "runs_database", None):
        return str(args.runs_database)
    if args.runs_data_dir is None and "runs_database" in args:
        return database_url_from_env()
    return None


def _where(args: argparse.Namespace) -> str:
    url = _database(args)
    if url:
        from openfunctions.store import redact_dsn

        return redact_dsn(url)
    return str(_dir(args))


def _runs(args: argparse.Namespace, run_id: str | None = None) -> dict[str, Any]:
    """The runs folded from the database (``--database``) or the data dir's run journals."""
    url = _database(args)
    if url:
        import asyncio

        from ._runlog import read_runs_in_database

        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)  # one clear error, not the pool's raw retries
        return asyncio.run(read_runs_in_database(url, run_id, connect_timeout=CLI_CONNECT_TIMEOUT_S))
    return read_runs(_dir(args))


def cmd_list(args: argparse.Namespace) -> int:
    try:
        runs = list(_runs(args).values())
    except OpenFunctionsError as exc:
        return _fail(exc)
    rows = [r.summary() for r in runs
            if (args.agent is None or r.agent == args.agent) and (args.status is None or r.status == args.status)]
    rows = rows[-args.n:] if args.n > 0 else rows
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no runs in {_where(args)}")
        return 0
    for row in rows:
        print(f"{row['run_id']}  {row['agent']:<20} {row['status']:<11} rounds={row['rounds']:<3} "
              f"{row['provider']}/{row['model']}  {row['started_at']}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    try:
        run = _runs(args, args.run_id).get(args.run_id)
    except OpenFunctionsError as exc:
        return _fail(exc)
    if run is None:
        print(f"openfunctions-mcp runs: no run {args.run_id!r} in {_where(args)}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(run.to_dict(), indent=2, ensure_ascii=False))
        return 0
    s, f = run.started, run.finished or {}
    print(f"run {run.run_id}  agent {run.agent}  status {run.status}")
    print(f"  model      {s.get('provider')}/{s.get('model')}   started {s.get('started_at')}   finished {f.get('finished_at')}")
    print(f"  parent     run {s.get('parent_run_id')}  receipt {s.get('parent_receipt_id')}")
    print(f"  digests    instructions {s.get('instructions_sha256')}  capability {s.get('capability_sha256')}")
    print(f"  tools      {', '.join(t['name'] for t in s.get('tools', [])) or '(none)'}")
    print(f"  limits     {s.get('limits')}")
    print(f"  task       {s.get('task', '')[:200]!r}")
    for rd in run.rounds:
        calls = ", ".join(f"{c['name']}->{c['outcome']}" for c in rd.get("tool_calls", [])) or "text"
        print(f"  round {rd['round']:<3} {rd.get('model')} {rd.get('stop_reason')}: {calls}")
    if f:
        print(f"  usage      {f.get('usage')}   receipts {len(f.get('receipts', []))}")
        if f.get("error"):
            print(f"  error      {f['error'].get('code')}: {f['error'].get('message')}")
        print(f"  text       {f.get('text', '')[:2000]}")
    for c in run.chain():
        state = "verified" if c["verified"] else "unverified" + (f" (awaiting {', '.join(c['pending'])})" if c["pending"] else "")
        print(f"  claim      {c['claim_id']} {state}")
        for v in run.verifications:
            if v.get("claim_id") == c["claim_id"]:
                e = v.get("evidence") or {}
                what = f"receipt {e.get('receipt_id')} ({e.get('tool')})" if e.get("kind") == "receipt" else \
                    f"work proof {e.get('proof_digest')} (attempt {e.get('attempt_id')})"
                print(f"    verified {v['verification_id']} by {what}, covers {len(v.get('covers') or [])} call(s)")
    if run.fulfilment is not None:
        ful = run.fulfilment
        print(f"  fulfilled  {ful['fulfilment_id']} {ful.get('fulfilled_at')}"
              + (f"  reason: {ful['reason']}" if ful.get("reason") else "  (every claim verified)"))
    elif run.claims:
        print("  fulfilled  no")
    return 0


def _find_receipt(data_dir: Path, receipt_id: str) -> dict[str, Any] | None:
    """The receipt ``receipt_id`` in the data dir's execution journals (every profile, every segment)."""
    from openfunctions.core.journal import segment_paths

    found = None
    for p in sorted((data_dir / "journal").glob("*.journal")):
        if p.name.startswith("runs."):
            continue
        for f in [*segment_paths(p), p]:
            for rec in read_records(f):
                if rec.type == "receipt" and rec.data.get("receipt_id") == receipt_id:
                    found = rec.data  # the last one wins (a recovered receipt precedes none)
    return found


def _write(args: argparse.Namespace, fn: Any) -> int:
    import asyncio

    from ._runlog import RunJournal

    async def main() -> dict[str, Any]:
        runs = await RunJournal.open_in(_dir(args))
        try:
            return await fn(runs)  # type: ignore[no-any-return]
        finally:
            await runs.close()

    try:
        rec = asyncio.run(main())
    except OpenFunctionsError as exc:
        print(f"openfunctions-mcp runs: {exc.code}: {exc.message}", file=sys.stderr)
        return 1 if exc.code == "run_not_found" else 2
    print(json.dumps(rec, indent=2, ensure_ascii=False) if args.json else
          " ".join(f"{k}={rec[k]}" for k in ("verification_id", "fulfilment_id", "claim_id", "reason") if rec.get(k)))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from ._claims import verify_claim

    receipt: Any = None
    proof: Any = None
    try:
        if args.receipt is not None:
            receipt = _find_receipt(_dir(args), args.receipt)
            if receipt is None:
                print(f"openfunctions-mcp runs: no receipt {args.receipt!r} in {_dir(args) / 'journal'}", file=sys.stderr)
                return 1
        else:
            try:
                proof = json.loads(args.proof.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                print(f"openfunctions-mcp runs: cannot read the proof {args.proof}: {exc}", file=sys.stderr)
                return 2
    except OpenFunctionsError as exc:
        return _fail(exc)
    return _write(args, lambda runs: verify_claim(runs, args.run_id, args.claim_id, receipt=receipt, work_proof=proof,
                                                  covers=args.covers, by=args.by))


def cmd_fulfil(args: argparse.Namespace) -> int:
    from ._claims import fulfil_task

    return _write(args, lambda runs: fulfil_task(runs, args.run_id, reason=args.reason, by=args.by))


def _print_record(rec: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"type": rec.type, "time": rec.time, "data": rec.data}, ensure_ascii=False), flush=True)
        return
    d = rec.data
    extra = d.get("status") or (f"round {d['round']}" if "round" in d else d.get("agent", ""))
    print(f"{rec.time or '-'}  {rec.type:<14} {d.get('run_id')}  {extra}", flush=True)


def _read_all(data_dir: Path) -> dict[Path, list[Any]]:
    return {p: list(read_records(p)) for p in journal_files(data_dir)}


def _tail_database(args: argparse.Namespace, url: str) -> int:
    import asyncio

    from ._runlog import TAIL_POLL_S, tail_runs_in_database

    def ready() -> None:
        print(f"following run records in {_where(args)} (every {TAIL_POLL_S} s; Ctrl-C stops)", file=sys.stderr,
              flush=True)

    # The pool's own retry warnings (raw, one per failed connect) would precede the one clear error below.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    try:
        asyncio.run(tail_runs_in_database(url, lambda rec: _print_record(rec, args.json), last=args.n,
                                          follow=args.follow, ready=ready, connect_timeout=CLI_CONNECT_TIMEOUT_S))
    except OpenFunctionsError as exc:
        return _fail(exc)
    except KeyboardInterrupt:
        return 0
    return 0


def cmd_tail(args: argparse.Namespace) -> int:
    url = _database(args)
    if url:
        return _tail_database(args, url)
    data_dir = _dir(args)
    try:
        files = _read_all(data_dir)
    except OpenFunctionsError as exc:
        return _fail(exc)
    records = sorted(itertools.chain.from_iterable(files.values()), key=lambda r: r.time)
    for rec in records[-args.n:] if args.n > 0 else []:
        _print_record(rec, args.json)
    if not args.follow:
        return 0
    import time

    seen = {p: len(recs) for p, recs in files.items()}
    print(f"following run records in {data_dir / 'journal'} (Ctrl-C stops)", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(0.5)
            try:
                files = _read_all(data_dir)
            except OpenFunctionsError as exc:
                return _fail(exc)
            fresh = []
            for p, recs in files.items():
                start = seen.get(p, 0)
                if len(recs) < start:  # the file was rotated: a new file at the same path
                    start = 0
                fresh += recs[start:]
                seen[p] = len(recs)
            for rec in sorted(fresh, key=lambda r: r.time):
                _print_record(rec, args.json)
    except KeyboardInterrupt:
        return 0


__all__ = ["add_commands"]
