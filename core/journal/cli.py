"""``openfunctions-mcp journal inspect|verify|tail|show|reopen``: journal tools.

The server CLI calls :func:`add_commands` with its subparsers; each handler
takes the parsed ``args`` and returns the exit code. Also runnable as
``python -m openfunctions.core.journal.cli inspect PATH``. Readers take no
lock: these commands work while a server is writing (an in-flight write
shows as a torn tail).

Reading is not writing: a journal copied elsewhere (mode 0644, another
owner) is read with a warning on stderr; a symlink or a non-regular file is
still refused. ``tail --follow`` keeps printing records as they are
appended (polling; each change re-validates the file from its start, and a
rotation to a new segment is followed). ``show RECEIPT_ID`` finds the start
and receipt records of one call in the given journals, or in every journal
and segment of the data directory.

``verify``, ``tail`` and ``show`` also read the execution journals that
``serve --database URL`` replicas share (``--database URL``, optionally
``--journal NAME``), when the group was added with a :class:`DatabaseJournals`
reader: ``openfunctions-mcp journal`` is (the store package adds it:
``store/journal_cli.py``; the core reads files only). Every replica's stream, ``verify`` checking each
stream's chain and one receipt per call across them, ``tail`` and ``show``
merging the streams by record time (``store/_pg_journal_read.py``). Their
text lines start with the time, then ``journal/stream:seq``.

``reopen PATH`` is the one command that asks something of a running server:
the server holding ``PATH`` re-opens it through recovery now, if it failed
(a full disk) and it is safe (no call from the failed file still runs, and
a 64 KiB written-and-fsynced probe succeeds), regardless of its automatic
re-open interval. It writes nothing into the journal. The request is an
empty file ``<journal>.reopen-request.<nonce>`` (32 hex; created
exclusively, mode 0600: an empty file needs no data block, so this works on
a disk that is still full); the server answers by renaming it to
``<journal>.reopen-<reopened|healthy|refused>.<nonce>`` and writing the
reason into it when there is room (format: ``openfunctions.servers._journal_reopen``).
``reopen`` waits ``--wait`` seconds (default 15) for the answer, removes it,
and exits 0 when the journal was re-opened or had not failed, 1 when the
server refused (with its reason), 2 when no live server holds the journal
or no answer came in time.

Exit codes: 0 the journal is valid (a torn tail is repairable and reported,
not an error); 1 the journal is corrupt (the reason names offset and line);
2 the file cannot be read (missing, symlink, not a regular file), or
``show`` found no such receipt.
"""

from __future__ import annotations

import argparse
import collections
import errno
import os
import stat
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from .._canonical import canonical_json
from ..errors import JournalCorrupt, JournalError
from ._decoder import ScanResult, scan
from ._lock import kernel_holders, lock_path
from ._log import file_stamp, segment_paths
from ._record import Record

EXIT_OK, EXIT_CORRUPT, EXIT_UNREADABLE = 0, 1, 2


class DatabaseJournals(Protocol):
    """What reads execution journals kept in a database, for ``--database URL`` and ``verify URL``."""

    def run(self, command: str, args: argparse.Namespace) -> int:
        """Run ``tail``, ``show`` or ``verify`` against ``args.database``; the exit code."""
        ...

    def verify_database(self, url: str, journal: str | None) -> int:
        """``journal verify postgresql://...``: what ``db verify`` checks; the exit code."""
        ...


def add_commands(subparsers: Any, database: DatabaseJournals | None = None) -> None:
    """Add the ``journal`` command group to an argparse subparsers object; ``database`` reads database journals."""
    j = subparsers.add_parser("journal", help="inspect and verify journals (read-only, no lock taken)",
                              description="Read-only tools for openfunctions journals.")
    jsub = j.add_subparsers(dest="journal_command", metavar="{inspect,verify,tail,show,reopen}")
    j.set_defaults(func=lambda args: (j.print_help(sys.stderr), 2)[1], journal_database=database)

    p = jsub.add_parser("inspect", help="summary: records, types, last seq, torn tail, owner")
    p.add_argument("path", type=Path)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_inspect)

    p = jsub.add_parser("verify", help="validate every record; non-zero exit with the reason on corruption")
    p.add_argument("path", type=_file_or_url, nargs="?",
                   help="a journal file (or --database; a postgresql:// URL here: every component, as `db verify`)")
    _database_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_verify)

    p = jsub.add_parser("tail", help="print the last N records")
    p.add_argument("path", type=Path, nargs="?", help="a journal file (or --database)")
    _database_args(p)
    p.add_argument("-n", type=int, default=10, metavar="N", help="how many records (default 10)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing records as they are appended (Ctrl-C to stop); follows rotation")
    p.add_argument("--interval", type=float, default=0.5, metavar="SECONDS",
                   help="with --follow, how often to look for new records (default 0.5)")
    p.add_argument("--json", action="store_true", help="machine-readable output (with --follow: one record per line)")
    p.set_defaults(func=cmd_tail)

    p = jsub.add_parser("show", help="the start and receipt records of one call, by receipt id")
    p.add_argument("receipt_id", metavar="RECEIPT_ID", help="a receipt id (rcpt_...) from a result's _meta")
    p.add_argument("paths", type=Path, nargs="*", metavar="PATH",
                   help="journals to search (default: every journal and segment under <data-dir>/journal)")
    p.add_argument("--data-dir", type=Path, metavar="DIR",
                   help="the server's data dir (default: $OPENFUNCTIONS_MCP_DATA_DIR, else the per-user data dir)")
    p.add_argument("--database", metavar="URL",
                   help="search the execution journals of this PostgreSQL database (serve --database) instead")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_show)

    p = jsub.add_parser("reopen", help="ask the running server to re-open its failed journal now (through recovery)",
                        description="Ask the live server that holds PATH to re-open it through full recovery now "
                                    "(after a full disk was freed). Safe: it refuses while a call from the failed "
                                    "file still runs or the disk still refuses a probe write, and says why.")
    p.add_argument("path", type=Path, help="the journal file the server writes (<data-dir>/journal/<profile>.journal)")
    p.add_argument("--wait", type=float, default=15.0, metavar="SECONDS",
                   help="how long to wait for the server's answer (default 15)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_reopen)


def _database_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--database", metavar="URL",
                   help="read the execution journals in this PostgreSQL database (serve --database) instead of a "
                        "file: every replica's stream, merged by time")
    p.add_argument("--journal", metavar="NAME", help="with --database: only this journal (a profile: tools, work, ...)")


# -- shared ------------------------------------------------------------------

_DATABASE_SCHEMES = ("postgresql://", "postgres://")


def _file_or_url(text: str) -> Path | str:
    """A journal file, or a database URL kept as typed (a ``Path`` would fold its ``//``)."""
    return text if text.startswith(_DATABASE_SCHEMES) else Path(text)


def _database(args: argparse.Namespace, command: str) -> int | None:
    """Run ``command`` against ``--database`` through the group's :class:`DatabaseJournals`, or None when no
    database was given."""
    if not getattr(args, "database", None):
        if getattr(args, "path", "") is None:
            print(f"journal {command}: give a journal file or --database URL", file=sys.stderr)
            return EXIT_UNREADABLE
        return None
    if getattr(args, "path", None) is not None or getattr(args, "paths", None):
        print(f"journal {command}: give a journal file or --database URL, not both", file=sys.stderr)
        return EXIT_UNREADABLE
    reader = _database_reader(args, command)
    return reader.run(command, args) if reader is not None else EXIT_UNREADABLE


def _database_reader(args: argparse.Namespace, command: str) -> DatabaseJournals | None:
    reader: DatabaseJournals | None = getattr(args, "journal_database", None)
    if reader is None:
        print(f"journal {command}: this command reads journal files only; database journals are read by "
              f"`openfunctions-mcp journal {command}` (or `python -m openfunctions.store.journal_cli`)", file=sys.stderr)
    return reader


def _scan(path: Path, on_record: Callable[[Record], None] | None = None, *,
          judge: bool = False) -> tuple[ScanResult, dict[str, int]]:
    """Validate ``path`` lock-free; also count records per type (for ``inspect``). ``judge``: when no writer holds
    the file, judge what lies past the end of its data as the next open would (``Decoder``'s ``writer_gone``)."""
    types: dict[str, int] = {}

    def see(rec: Record) -> None:
        types[rec.type] = types.get(rec.type, 0) + 1
        if on_record is not None:
            on_record(rec)

    fd = _open_for_reading(Path(os.path.abspath(path)))
    try:
        writer_gone = judge and _owner(Path(path))["locked"] is False
        return scan(fd, str(path), on_record=see, writer_gone=writer_gone), types
    finally:
        os.close(fd)


_warned: set[str] = set()


def _open_for_reading(path: Path) -> int:
    """Open a journal read-only: refuse a symlink or a non-regular file; warn (once) about a shared mode or owner.

    A server refuses such a file for writing (``core.files.check_private``); a
    reader only looks, so a copied journal (``cp`` leaves 0644) can be read.
    """
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it has no effect on a regular file).
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise JournalError(f"refusing to read {str(path)!r}: it is a symlink (give the file it points to)",
                               details={"path": str(path)}) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise JournalError(f"refusing to read {str(path)!r}: it is not a regular file", details={"path": str(path)})
    shared = []
    if st.st_mode & 0o077:
        shared.append(f"mode {stat.S_IMODE(st.st_mode):04o} (group or others can read it)")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        shared.append(f"owner uid {st.st_uid}, not you")
    if shared and str(path) not in _warned:
        _warned.add(str(path))
        print(f"warning: {path} has {' and '.join(shared)}; reading it anyway (a server would refuse to write it: "
              "journals are 0600 and yours)", file=sys.stderr)
    return fd


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
        print(canonical_json({"ok": False, "path": str(getattr(args, "path", "") or ""), "error": exc.to_dict()}))
    else:
        print(f"{what}: {exc.message}", file=sys.stderr)
    return code


def _guard(args: argparse.Namespace, fn: Callable[[], int]) -> int:
    try:
        return fn()
    except JournalError as exc:
        return _fail(args, exc, "journal " + args.journal_command)
    except OSError as exc:
        where = exc.filename if exc.filename is not None else getattr(args, "path", "?")
        err = JournalError(f"cannot read {str(where)!r}: {exc.strerror or exc}", details={"path": str(where)})
        return _fail(args, err, "journal " + args.journal_command)


def _torn(r: ScanResult) -> dict[str, Any] | None:
    if r.torn is None:
        return None
    return {"offset": r.torn.offset, "length": r.torn.length, "reason": r.torn.reason}


# -- commands ----------------------------------------------------------------


def cmd_inspect(args: argparse.Namespace) -> int:
    def run() -> int:
        r, types = _scan(args.path, judge=True)
        assert r.header is not None
        p = str(args.path)
        info: dict[str, Any] = {
            "ok": True,
            "path": p,
            "header": r.header.to_dict(),
            "records": r.records,
            "v1_records": r.v1_records,
            "last_seq": r.last_seq,
            "types": dict(sorted(types.items())),
            "size": os.stat(args.path).st_size,
            "reserved": r.reserved,
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
        reserved = f", {r.reserved} of them room reserved by the writer" if r.reserved else ""
        print(f"records   {r.records} (last seq {r.last_seq}{f', {r.v1_records} v1' if r.v1_records else ''}), {info['size']} bytes{reserved}")
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
    if isinstance(args.path, str):  # `journal verify postgresql://...`: the whole database, what `db verify` checks
        if args.database:
            print("journal verify: give a database URL or --database URL, not both", file=sys.stderr)
            return EXIT_UNREADABLE
        reader = _database_reader(args, "verify")
        return reader.verify_database(args.path, args.journal) if reader is not None else EXIT_UNREADABLE
    via_database = _database(args, "verify")
    if via_database is not None:
        return via_database

    def run() -> int:
        r, _ = _scan(args.path, judge=True)
        torn = _torn(r)
        if args.json:
            print(canonical_json({"ok": True, "path": str(args.path), "records": r.records, "last_seq": r.last_seq, "torn_tail": torn}))
        else:
            note = f"; torn tail of {torn['length']} bytes at offset {torn['offset']} ({torn['reason']}) will be repaired on the next open" if torn else ""
            print(f"ok: {r.records} records, last seq {r.last_seq}, checksums and chain valid{note}")
        return EXIT_OK

    return _guard(args, run)


def _print_record(rec: Record, as_json: bool) -> None:
    if as_json:
        print(canonical_json(rec.to_dict()), flush=True)
    else:
        print(f"{rec.seq}\t{rec.time}\t{rec.type}\t{canonical_json(rec.data)}", flush=True)


def cmd_tail(args: argparse.Namespace) -> int:
    via_database = _database(args, "tail")
    if via_database is not None:
        return via_database

    def run() -> int:
        if args.n < 0:
            raise JournalError(f"-n must be >= 0, got {args.n}")
        last: collections.deque[Record] = collections.deque(maxlen=args.n)
        # before the scan: a record appended between the scan and the first poll then differs from it
        before = _identity(Path(args.path)) if args.follow else None
        r, _ = _scan(args.path, last.append)
        if args.follow:
            for rec in last:
                _print_record(rec, args.json)
            return _follow(args, r, before)
        if args.json:
            print(canonical_json({"ok": True, "path": str(args.path), "records": [r.to_dict() for r in last]}))
            return EXIT_OK
        for rec in last:
            _print_record(rec, False)
        return EXIT_OK

    return _guard(args, run)


def _identity(path: Path) -> tuple[int, int, int, int, int] | None:
    """Which file is at ``path`` and where its data ends (``file_stamp``: not the size, which stays put while
    the writer fills room it reserved); ``None`` while it is missing (mid-rotation)."""
    return file_stamp(path)


def _follow(args: argparse.Namespace, seen: ScanResult, current: tuple[int, int, int, int, int] | None) -> int:
    """Poll ``args.path``; print what was appended since ``seen`` was scanned (``current``: the file's identity
    taken before that scan, so an append during or right after it is noticed; a record printed already is
    skipped by its seq). A new file at the path (rotation) is read from its start."""
    path = Path(args.path)
    interval = max(0.05, float(args.interval))
    journal_id = seen.header.journal_id if seen.header else None
    last_seq = seen.last_seq
    try:
        while True:
            time.sleep(interval)
            now = _identity(path)
            if now is None or now == current:
                continue
            current = now
            fresh: list[Record] = []
            r, _ = _scan(path, fresh.append)
            new_file = (r.header.journal_id if r.header else None) != journal_id
            if new_file:
                journal_id, last_seq = (r.header.journal_id if r.header else None), 0
                print(f"-- {path}: a new segment (journal {journal_id}) --", file=sys.stderr, flush=True)
            for rec in fresh:
                if rec.seq > last_seq:
                    _print_record(rec, args.json)
            last_seq = max(last_seq, r.last_seq)
    except KeyboardInterrupt:
        return EXIT_OK


def _default_data_dir() -> Path:
    from ..files import default_data_dir as _shared_default

    return Path(_shared_default())


def _journal_files(data_dir: Path) -> list[Path]:
    """Every journal and finished segment under ``data_dir/journal`` (not locks, broken or pre-v2 copies)."""
    root = data_dir / "journal"
    if not root.is_dir():
        return []
    out = []
    for p in sorted(root.rglob("*")):
        name = p.name
        if p.is_symlink() or not p.is_file() or name.endswith((".lock", ".pre-v2")) or ".broken" in name:
            continue
        if name.endswith(".journal") or ".journal.seg-" in name or name.endswith(".jsonl"):
            out.append(p)
    return out


def cmd_show(args: argparse.Namespace) -> int:
    via_database = _database(args, "show")
    if via_database is not None:
        return via_database

    def run() -> int:
        paths = list(args.paths) or _journal_files((args.data_dir or _default_data_dir()).expanduser())
        found: list[tuple[Path, Record]] = []
        for p in paths:
            def keep(rec: Record, _p: Path = p) -> None:
                if rec.data.get("receipt_id") == args.receipt_id:
                    found.append((_p, rec))

            _scan(p, keep)
        if not found:
            where = ", ".join(map(str, paths)) if args.paths else f"{len(paths)} journal file(s) under " \
                f"{(args.data_dir or _default_data_dir()).expanduser() / 'journal'}"
            raise JournalError(f"no record of receipt {args.receipt_id!r} in {where}",
                               details={"receipt_id": args.receipt_id})
        if args.json:
            print(canonical_json({"ok": True, "receipt_id": args.receipt_id,
                                  "records": [{"path": str(p), **rec.to_dict()} for p, rec in found]}))
            return EXIT_OK
        import json

        for p, rec in found:
            print(f"{rec.type} (seq {rec.seq}, {rec.time}) in {p}")
            print("  " + json.dumps(rec.data, indent=2, ensure_ascii=False, sort_keys=True).replace("\n", "\n  "))
        return EXIT_OK

    return _guard(args, run)


def _no_room_reason(directory: Path) -> str:
    """The server's answer had no room for its reason: look for ourselves (a 64 KiB write, removed)."""
    probe = directory / f".reopen-probe.{os.getpid()}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, b"\0" * 65536)
        finally:
            os.close(fd)
    except OSError as exc:
        return (f"the server gave no reason (no room to write it); a 64 KiB probe write in {directory} fails here "
                f"too: {exc.strerror or exc}")
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass
    return "the server gave no reason (no room to write it): see its log (journal_reopen_requested)"


def cmd_reopen(args: argparse.Namespace) -> int:
    import json
    import secrets

    def out(ok: bool, code: int, message: str, **extra: Any) -> int:
        if args.json:
            print(canonical_json({"ok": ok, "path": str(args.path), "message": message, **extra}))
        else:
            print(message, file=sys.stdout if ok else sys.stderr)
        return code

    def run() -> int:
        path = Path(os.path.abspath(args.path))
        if not path.is_file() or path.is_symlink():
            raise JournalError(f"{str(path)!r} is not a journal file", details={"path": str(path)})
        owner = _owner(path)
        if owner["locked"] is False:
            return out(False, EXIT_UNREADABLE, f"no running server holds {path}: a server re-opens (and recovers) "
                       "its journal when it starts", status="no_server")
        nonce = secrets.token_hex(16)
        request = path.with_name(f"{path.name}.reopen-request.{nonce}")
        os.close(os.open(request, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        answers = {s: path.with_name(f"{path.name}.reopen-{s}.{nonce}") for s in ("reopened", "healthy", "refused")}
        deadline = time.monotonic() + args.wait
        while time.monotonic() < deadline:
            for status, answer in answers.items():
                if not answer.exists():
                    continue
                time.sleep(0.2)  # the reason is written right after the rename
                try:
                    doc = json.loads(answer.read_bytes() or b"{}")
                except (OSError, ValueError):
                    doc = {}
                answer.unlink(missing_ok=True)
                reason = doc.get("reason") if isinstance(doc, dict) else None
                journal = doc.get("journal") or str(path)
                if status == "reopened":
                    return out(True, EXIT_OK, f"re-opened {journal} through recovery", status=status)
                if status == "healthy":
                    return out(True, EXIT_OK, f"{path} had not failed: nothing to do", status=status)
                reason = reason or _no_room_reason(path.parent)
                return out(False, EXIT_CORRUPT, f"the server refused to re-open {path}: {reason}", status=status,
                           reason=reason)
            time.sleep(0.1)
        request.unlink(missing_ok=True)
        pid = f" (pid {owner['pid']})" if owner.get("pid") else ""
        return out(False, EXIT_UNREADABLE, f"no answer from the server holding {path}{pid} within {args.wait:g} s; "
                   "its log says more", status="no_answer")

    return _guard(args, run)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m openfunctions.core.journal.cli")
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["journal", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["add_commands", "cmd_inspect", "cmd_reopen", "cmd_show", "cmd_tail", "cmd_verify", "main"]
