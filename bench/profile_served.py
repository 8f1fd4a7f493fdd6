"""Where a served ``tools/call``'s CPU goes, per server thread: µs per call on the event loop's thread and the others.

Starts a server over HTTP (``serve --transport http --stateless``, through
``bench/load_http.py``'s ``_start``), warms it up (4 clients, 1 s), drives
``--clients`` lean raw-HTTP clients (``load_http.LeanClients``: keep-alive
HTTP/1.1, 2026-07-28 ``tools/call`` of ``of_hash_text``) for ``--seconds``,
and reads every server thread's utime/stime from
``/proc/<pid>/task/*/stat`` before and after. Prints, per variant, the median
over ``--rounds`` interleaved rounds (variant A, B, A, B, ...) of:

- ``loop_u``/``loop_s``: µs of user/system CPU per call on the event loop's
  thread (the process's main thread: the one every served call's Python runs on);
- ``other_u``/``other_s``: the same on every other thread (the journal's writer);
- ``calls/s`` and the error count.

Variants (any number, in the order given):

- ``ours``: the default server (journal on), ``ours-no-journal`` (``--no-journal``),
  ``ours-journal-thread`` (``--journal-sync thread``), ``ours-no-fast-path``, ``ours-h11`` (``--http h11``): this checkout;
- ``sdk``: the SDK's ``MCPServer`` under uvicorn (``auto``: uvloop + httptools);
- any ``ours*`` variant with ``@REV`` (a git revision: ``ours@HEAD~1``,
  ``ours@main``): the same server run from that revision's tree (extracted with
  ``git archive`` into a temporary directory and put first on ``PYTHONPATH``),
  for paired A/B runs of old and new code in one run.

The machine is shared and noisy: compare variants within one run only, and
quote medians. Prints only; nothing is written to docs/.

    python bench/profile_served.py [--clients 16] [--rounds 3] [--seconds 4] ours@main ours
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(ROOT))
import load_http  # noqa: E402
from _report import thread_cpu  # noqa: E402

KINDS = ("ours", "ours-no-journal", "ours-journal-thread", "ours-no-fast-path", "ours-h11", "sdk")
COLUMNS = ("loop_u", "loop_s", "other_u", "other_s", "calls/s")


def thread_times(pid: int) -> dict[str, tuple[float, float]]:
    """``{tid: (user seconds, system seconds)}`` of every thread of ``pid``."""
    return {tid: (user, system) for tid, (_name, user, system, _cpu) in thread_cpu(pid).items()}


def parse_variant(text: str) -> tuple[str, str | None]:
    """``"ours@main"`` -> ``("ours", "main")``; the kind must be one of :data:`KINDS`."""
    kind, _, rev = text.partition("@")
    if kind not in KINDS:
        raise argparse.ArgumentTypeError(f"unknown variant kind {kind!r} in {text!r}; expected one of {', '.join(KINDS)}")
    if rev and not kind.startswith("ours"):
        raise argparse.ArgumentTypeError(f"{text!r}: only our server can run from another revision")
    return kind, rev or None


@contextmanager
def revision_path(rev: str) -> Iterator[str]:
    """A directory to put first on ``PYTHONPATH`` so that ``openfunctions`` imports from ``rev``'s tree."""
    with tempfile.TemporaryDirectory(prefix="profile-served-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev], capture_output=True, check=False)
        if archive.returncode != 0:
            raise SystemExit(f"git archive {rev!r} failed: {archive.stderr.decode().strip()}")
        tar = Path(tmp) / "tree.tar"
        tar.write_bytes(archive.stdout)
        with tarfile.open(tar) as t:
            t.extractall(tree, filter="data")
        package = Path(tmp) / "path" / "openfunctions"
        package.mkdir(parents=True)
        for sub in tree.iterdir():  # every top-level folder with an __init__.py is a subpackage (pyproject's package-dir)
            if (sub / "__init__.py").is_file():
                (package / sub.name).symlink_to(sub, target_is_directory=True)
        yield str(package.parent)


def cell(kind: str, pythonpath: str | None, clients: int, seconds: float) -> dict[str, float]:
    """One server started, warmed up, loaded for ``seconds``, stopped: its per-call figures."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = load_http._start(kind, Path(tmp), env=env)
        try:
            asyncio.run(load_http._load(port, 4, 1.0))
            before = thread_times(proc.pid)
            latencies, errors, wall = asyncio.run(load_http._load(port, clients, seconds))
            after = thread_times(proc.pid)
        finally:
            load_http._stop(proc)
    calls = max(len(latencies), 1)
    res = {"calls/s": len(latencies) / wall, "errors": float(len(errors)), "loop_u": 0.0, "loop_s": 0.0,
           "other_u": 0.0, "other_s": 0.0}
    for tid, (user, system) in after.items():
        if tid in before:
            role = "loop" if tid == str(proc.pid) else "other"
            res[role + "_u"] += (user - before[tid][0]) / calls * 1e6
            res[role + "_s"] += (system - before[tid][1]) / calls * 1e6
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Example: python bench/profile_served.py --clients 16 --rounds 3 ours@main ours",
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("variants", nargs="*", type=parse_variant, default=None,
                    help=f"KIND or KIND@REV; KIND one of {', '.join(KINDS)} (default: ours ours-no-journal)")
    ap.add_argument("--clients", type=int, default=16, help="concurrent lean clients (default 16)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are printed (default 3)")
    ap.add_argument("--seconds", type=float, default=4.0, help="measured seconds per cell (default 4)")
    args = ap.parse_args(argv)
    variants: list[tuple[str, str | None]] = args.variants or [("ours", None), ("ours-no-journal", None)]
    if args.clients < 1 or args.rounds < 1 or args.seconds <= 0:
        ap.error("--clients and --rounds must be at least 1, --seconds positive")
    paths: dict[str, str] = {}
    rows: dict[str, list[dict[str, float]]] = {}
    with ExitStack() as stack:
        for _kind, rev in variants:
            if rev is not None and rev not in paths:
                paths[rev] = stack.enter_context(revision_path(rev))
        for _ in range(args.rounds):
            for kind, rev in variants:
                name = kind + (f"@{rev}" if rev else "")
                rows.setdefault(name, []).append(cell(kind, paths.get(rev or ""), args.clients, args.seconds))
    print(f"µs of CPU per call by server thread, {args.clients} clients, {args.seconds:g} s per cell, "
          f"median of {args.rounds} interleaved rounds")
    print(f"{'variant':28s}" + "".join(f"{c:>10s}" for c in COLUMNS) + f"{'errors':>8s}")
    for name, cells in rows.items():
        medians = [statistics.median(c[col] for c in cells) for col in COLUMNS]
        errors = sum(int(c["errors"]) for c in cells)
        print(f"{name:28s}" + "".join(f"{m:10.0f}" for m in medians) + f"{errors:8d}")
    names = list(rows)
    if len(names) > 1:  # paired: each round's cells ran back to back, so their difference saw about the same load
        first = rows[names[0]]
        print(f"\nloop thread (user + system) against {names[0]}, median of the per-round differences:")
        for name in names[1:]:
            deltas = [(c["loop_u"] + c["loop_s"]) - (f["loop_u"] + f["loop_s"]) for c, f in zip(rows[name], first, strict=True)]
            print(f"{name:28s}{statistics.median(deltas):+10.0f} µs/call  (rounds: {', '.join(f'{d:+.0f}' for d in deltas)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
