"""``openfunctions-mcp journal inspect|verify|tail PATH``: read-only journal tools.

The server CLI calls :func:`add_commands` with its subparsers; each handler
takes the parsed ``args`` and returns the exit code. Also runnable as
``python -m openfunctions.core.journal.cli inspect PATH``. Readers take no
lock: these commands work while a server is writing (an in-flight write
shows as a torn tail).

Exit codes: 0 the journal is valid (a torn tail is repairable and reported,
not an error); 1 the journal is corrupt (the reason names offset and line);
2 the file cannot be read safely (missing, symlink, wrong mode or owner).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

from ..canonical import canonical_json
from ..errors import JournalCorrupt, JournalError
from ._decoder import ScanResult, scan
from ._fsutil import open_private
from ._lock import kernel_holders, lock_path
from ._record import Record
from .log import segment_paths

EXIT_OK, EXIT_CORRUPT, EXIT_UNREADABLE = 0, 1, 2


def add_commands(subparsers: Any) -> None:
    """Add the ``journal`` command group to an argparse subparsers object."""
    j = subparsers.add_parser("journal", help="inspect and verify journals (read-only, no lock taken)",
                              description="Read-only tools for openfunctions journals.")
    jsub = j.add_subparsers(dest="journal_command", metavar="{inspect,verify,tail}")
    j.set_defaults(func=lambda args: (j.print_help(sys.stderr), 2)[1])

    p = jsub.add_parser("inspect", help="summary: records, types, last seq, torn tail, owner")
    p.add_argument("path", type=Path)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_inspect)

    p = jsub.add_parser("verify", help="validate every record; non-zero exit with the reason on corruption")
    p.add_argument("path", type=Path)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_verify)

    p = jsub.add_parser("tail", help="print the last N records")
    p.add_argument("path", type=Path)
    p.add_argument("-n", type=int, default=10, metavar="N", help="how many records (default 10)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_tail)


# -- shared ------------------------------------------------------------------


def _scan(path: Path, on_record: Callable[[Record], None] | None = None) -> tuple[ScanResult, dict[str, int]]:
    """Validate ``path`` lock-free; also count records per type (for ``inspect``)."""
    types: dict[str, int] = {}

    def see(rec: Record) -> None:
        types[rec.type] = types.get(rec.type, 0) + 1
        if on_record is not None:
            on_record(rec)

    fd = open_private(Path(os.path.abspath(path)), os.O_RDONLY)
    try:
        return scan(fd, str(path), on_record=see), types
    finally:
        os.close(fd)


def _owner(path: Path) -> dict[str, Any]:
    lp = lock_path(Path(os.path.abspath(path)))
    if not os.path.lexists(lp):
        return {"locked": False, "pid": None}
    holders = kernel_holders(lp)
    if holders:
        return {"locked": True, "pid": holders[0]}
    if os.path.exists("/proc/locks"):
        return {"locked": False, "pid": None}
    return {"locked": None, "pid": None}  # cannot tell without taking the lock


def _fail(args: argparse.Namespace, exc: JournalError, what: str) -> int:
    code = EXIT_CORRUPT if isinstance(exc, JournalCorrupt) else EXIT_UNREADABLE
    if args.json:
        print(canonical_json({"ok": False, "path": str(args.path), "error": exc.to_dict()}))
    else:
        print(f"{what}: {exc.message}", file=sys.stderr)
    return code


def _guard(args: argparse.Namespace, fn) -> int:
    try:
        return fn()
    except JournalError as exc:
        return _fail(args, exc, "journal " + args.journal_command)
    except OSError as exc:
        err = JournalError(f"cannot read {str(args.path)!r}: {exc.strerror or exc}", details={"path": str(args.path)})
        return _fail(args, err, "journal " + args.journal_command)


def _torn(r: ScanResult) -> dict[str, Any] | None:
    if r.torn is None:
        return None
    return {"offset": r.torn.offset, "length": r.torn.length, "reason": r.torn.reason}


# -- commands ----------------------------------------------------------------


def cmd_inspect(args: argparse.Namespace) -> int:
    def run() -> int:
        r, types = _scan(args.path)
        assert r.header is not None
        p = str(args.path)
        info = {
            "ok": True,
            "path": p,
            "header": r.header.to_dict(),
            "records": r.records,
            "v1_records": r.v1_records,
            "last_seq": r.last_seq,
            "types": dict(sorted(types.items())),
            "size": os.stat(args.path).st_size,
            "torn_tail": _torn(r),
            "owner": _owner(args.path),
            "pre_v2_copy": os.path.lexists(p + ".pre-v2"),
            "broken_copies": sorted(n for n in os.listdir(os.path.dirname(os.path.abspath(p))) if n.startswith(os.path.basename(p) + ".broken")),
            "segments": [s.name for s in segment_paths(p)],
            "previous": r.header.meta.get("previous") if isinstance(r.header.meta, dict) else None,
        }
        if args.json:
            print(canonical_json(info))
            return EXIT_OK
        h = r.header
        print(f"journal   {p}")
        print(f"format    v{h.version}, kind {h.kind}, id {h.journal_id}, created {h.created}")
        print(f"records   {r.records} (last seq {r.last_seq}{f', {r.v1_records} v1' if r.v1_records else ''}), {info['size']} bytes")
        for t, n in info["types"].items():
            print(f"  {t:<24} {n}")
        torn = info["torn_tail"]
        print("torn tail " + (f"{torn['length']} bytes at offset {torn['offset']} ({torn['reason']}); repaired on the next open" if torn else "none"))
        o = info["owner"]
        print("owner     " + (f"locked by pid {o['pid']}" if o["locked"] else "unknown" if o["locked"] is None else "none (not open for writing)"))
        prev = info["previous"]
        if isinstance(prev, dict):
            print(f"previous  segment {prev.get('file')} (journal {prev.get('journal_id')}, last seq {prev.get('last_seq')})")
        if info["segments"]:
            print(f"segments  {len(info['segments'])} finished: {', '.join(info['segments'])}")
        if info["pre_v2_copy"]:
            print(f"pre-v2    {p}.pre-v2 (restore it to downgrade)")
        for b in info["broken_copies"]:
            print(f"broken    {b}")
        return EXIT_OK

    return _guard(args, run)


def cmd_verify(args: argparse.Namespace) -> int:
    def run() -> int:
        r, _ = _scan(args.path)
        torn = _torn(r)
        if args.json:
            print(canonical_json({"ok": True, "path": str(args.path), "records": r.records, "last_seq": r.last_seq, "torn_tail": torn}))
        else:
            note = f"; torn tail of {torn['length']} bytes at offset {torn['offset']} ({torn['reason']}) will be repaired on the next open" if torn else ""
            print(f"ok: {r.records} records, last seq {r.last_seq}, checksums and chain valid{note}")
        return EXIT_OK

    return _guard(args, run)


def cmd_tail(args: argparse.Namespace) -> int:
    def run() -> int:
        if args.n < 0:
            raise JournalError(f"-n must be >= 0, got {args.n}")
        last: collections.deque[Record] = collections.deque(maxlen=args.n)
        _scan(args.path, last.append)
        if args.json:
            print(canonical_json({"ok": True, "path": str(args.path), "records": [r.to_dict() for r in last]}))
            return EXIT_OK
        for rec in last:
            print(f"{rec.seq}\t{rec.time}\t{rec.type}\t{canonical_json(rec.data)}")
        return EXIT_OK

    return _guard(args, run)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m openfunctions.core.journal.cli")
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["journal", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["add_commands", "cmd_inspect", "cmd_tail", "cmd_verify", "main"]
