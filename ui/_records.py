"""What the viewer shows: every record stream of a data directory, read through its owning package's reader.

Nothing here writes. Each stream is read lock-free by the code that owns its
format, so the viewer sees exactly what the CLI sees:

| stream | file(s) under the data dir | reader |
|---|---|---|
| receipts | ``journal/*.journal`` of kind ``execution`` (+ segments) | ``core.journal`` (validating decoder) |
| agent runs | ``journal/runs*.journal`` | ``agents.read_runs`` (the runs' one fold) |
| workflow runs | ``workflows/runs.journal`` | ``workflows.WorkflowRuns.list/show`` |
| work attempts | ``work/attempts/g*.jsonl``, ``work/resolutions.journal`` | ``work``'s attempt log + ``replay`` (the fold a restart does) |
| MCP tasks | ``journal/*.tasks.journal`` | ``servers._task_records.apply`` (the tasks' one fold) |
| chat conversations | ``chat/*.conversations.journal`` | ``chat._conversations.apply`` (the table's one fold) |

A file is parsed again only when its size or mtime changed (journals only
grow), so a page refresh or a live update re-reads only what was appended
to. Every value that goes out is bounded (:func:`bounded`): a long string is
cut with a note saying how much was left out, a long list likewise.
"""

from __future__ import annotations

import argparse
import os
import shlex
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

#: Longest string sent to the page (characters); the rest is replaced by a note.
MAX_STRING = 2000
#: Most items of a list or keys of an object sent to the page.
MAX_ITEMS = 200
#: Deepest nesting sent to the page (a run's tree takes two levels per generation: node, children list).
MAX_DEPTH = 40
#: Most rows a list endpoint answers with (newest first).
MAX_ROWS = 500
_T = TypeVar("_T")


def bounded(value: Any, *, depth: int = 0) -> Any:
    """``value`` as JSON with every string, list and object cut to the limits above, each cut saying so."""
    if isinstance(value, str):
        if len(value) > MAX_STRING:
            return value[:MAX_STRING] + f"… [{len(value) - MAX_STRING} more characters not shown]"
        return value
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if depth >= MAX_DEPTH:
        return "[nested too deep to show]"
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for i, (k, v) in enumerate(value.items()):
            if i >= MAX_ITEMS:
                out["…"] = f"[{len(value) - MAX_ITEMS} more keys not shown]"
                break
            out[str(k)[:200]] = bounded(v, depth=depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        items = [bounded(v, depth=depth + 1) for v in list(value)[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append(f"[{len(value) - MAX_ITEMS} more items not shown]")
        return items
    return bounded(str(value), depth=depth)


def bounded_object(value: dict[str, Any]) -> dict[str, Any]:
    """:func:`bounded` of a JSON object: at the top level an object stays an object."""
    out: dict[str, Any] = bounded(value)
    return out


@dataclass
class Stream:
    """One journal file the viewer reads, with what ``journal verify`` would say about it."""

    path: Path
    kind: str
    size: int  # bytes of records (a writer's reserved room after them not counted: ``core.journal.file_stamp``)
    mtime_ns: int
    records: list[Any]
    header_kind: str | None = None
    meta: dict[str, Any] | None = None
    ok: bool = True
    error: str | None = None
    last_seq: int = 0


def _scan(path: Path) -> tuple[list[Any], Any, str | None]:
    """``(records, header, error)``: the core journal's validating decoder over ``path``, lock-free.

    The same decoder ``read_records`` and ``journal verify`` run (checksums and the chain checked; an
    unterminated tail, a live writer's write in flight, is left out). On damage: the records before it
    and the reason."""
    from openfunctions.core.journal import JournalError
    from openfunctions.core.journal._decoder import Decoder

    records: list[Any] = []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        return [], None, f"cannot open: {exc.strerror or exc}"
    try:
        dec = Decoder(fd, str(path))
        try:
            for rec in dec:
                records.append(rec)
        except JournalError as exc:
            return records, dec.result.header, exc.message
        except (OSError, ValueError) as exc:
            return records, dec.result.header, str(exc)
        return records, dec.result.header, None
    finally:
        os.close(fd)


def _stamp(path: Path) -> tuple[int, int] | None:
    """(bytes of records, mtime) of a stream file, or None if it cannot be looked at. Not the file's size: the
    execution journal keeps room reserved past its records, so its size stays put while calls are appended
    (``core.journal.file_stamp`` finds where the records end)."""
    from openfunctions.core.journal import file_stamp

    try:
        stamp = file_stamp(path)
    except OSError:
        return None
    return None if stamp is None else (stamp[4], stamp[3])


def _kind(rel: str, header_kind: str | None) -> str | None:
    """Which stream a file is, from its header's kind (and, for the attempt log, where it lives)."""
    if rel.startswith("work/attempts/"):
        return "attempts"
    return {"execution": "receipts", "runs": "agent_runs", "tasks": "tasks", "workflow-runs": "workflow_runs",
            "chat-conversations": "conversations", "work-resolutions": "resolutions"}.get(header_kind or "",
                                                                                        header_kind or None)


def _candidates(root: Path) -> list[Path]:
    """Every journal file (and finished segment) the viewer knows where to find."""
    out: list[Path] = []
    for sub, patterns in (("journal", ("*.journal", "*.journal.seg-*")), ("workflows", ("runs.journal",)),
                          ("chat", ("*.conversations.journal",)), ("work/attempts", ("g*.jsonl",)),
                          ("work", ("resolutions.journal",))):
        d = root / sub
        if d.is_dir():
            for pattern in patterns:
                out += sorted(p for p in d.glob(pattern) if p.is_file() and not p.is_symlink())
    return out


class DataDir:
    """The record streams of one data directory, re-read as they grow (thread-safe: the app reads in a thread)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser()
        self.where = str(self.root)
        self._streams: dict[Path, Stream] = {}
        self._lock = threading.Lock()
        self._memos: dict[str, tuple[Any, Any]] = {}
        #: stream -> why its reader refused it (a damaged journal): the page shows it, the other streams still show
        self.problems: dict[str, str] = {}

    def _read(self, stream: str, read: Callable[[], _T], empty: _T) -> _T:
        """``read()``; if the owning package refuses (e.g. a damaged journal), ``empty`` and the reason kept."""
        from openfunctions.core import OpenFunctionsError

        try:
            value = read()
        except OpenFunctionsError as exc:
            self.problems[stream] = f"{exc.message} ({exc.code})"
            return empty
        self.problems.pop(stream, None)
        return value

    @property
    def files_root(self) -> Path | None:
        """The data directory the files (artifacts) are read from; None where the records are not files."""
        return self.root

    @property
    def place(self) -> str:
        """The CLI option that names where these records are (for the commands the page shows)."""
        return "--data-dir " + shlex.quote(str(self.root))

    def changed(self, before: Any, after: Any) -> list[str]:
        """What changed between two :meth:`signature` values: the stream files, relative to the data dir."""
        old, new = ({p: (s, m) for p, s, m in sig} for sig in (before, after))
        root = str(self.root)
        return sorted(p[len(root):].lstrip("/") for p in set(old) | set(new) if old.get(p) != new.get(p))

    def _memo(self, key: str, kinds: tuple[str, ...], build: Callable[[], _T]) -> _T:
        """``build()``, computed again only when a file of one of ``kinds`` changed (callers must not mutate it)."""
        sig = tuple((str(s.path), s.size, s.mtime_ns) for s in self.streams() if s.kind in kinds)
        held = self._memos.get(key)
        if held is not None and held[0] == sig:
            return cast(_T, held[1])  # one key, one build: the value is what this key's build returned
        value = build()
        self._memos[key] = (sig, value)
        return value

    # -- the files ---------------------------------------------------------------

    def signature(self) -> tuple[tuple[str, int, int], ...]:
        """(path, size of the records, mtime) of every stream file: what the live updates poll."""
        out = []
        for p in _candidates(self.root):
            stamp = _stamp(p)
            if stamp is not None:
                out.append((str(p), *stamp))
        return tuple(out)

    def streams(self) -> list[Stream]:
        with self._lock:
            seen = set()
            for p in _candidates(self.root):
                stamp = _stamp(p)
                if stamp is None:
                    continue
                seen.add(p)
                old = self._streams.get(p)
                if old is not None and (old.size, old.mtime_ns) == stamp:
                    continue
                records, header, error = _scan(p)
                rel = p.relative_to(self.root).as_posix()
                kind = _kind(rel, getattr(header, "kind", None)) or "other"
                self._streams[p] = Stream(p, kind, stamp[0], stamp[1], records,
                                          header_kind=getattr(header, "kind", None), meta=getattr(header, "meta", None),
                                          ok=error is None, error=error, last_seq=records[-1].seq if records else 0)
            for gone in set(self._streams) - seen:
                del self._streams[gone]
            return sorted(self._streams.values(), key=lambda s: str(s.path))

    def _of(self, kind: str) -> list[Stream]:
        return [s for s in self.streams() if s.kind == kind]

    def verify(self) -> list[dict[str, Any]]:
        """Per stream file: its kind, size, record count, last seq, and whether checksums and chain hold."""
        return [{"path": s.path.relative_to(self.root).as_posix(), "kind": s.kind, "size": s.size,
                 "records": len(s.records), "last_seq": s.last_seq, "ok": s.ok, "error": s.error,
                 "command": "openfunctions-mcp journal verify " + shlex.quote(str(s.path))} for s in self.streams()]

    # -- receipts ----------------------------------------------------------------

    def receipts(self) -> dict[str, dict[str, Any]]:
        """receipt id -> the receipt (or, for a call still running, its start record with ``outcome: running``)."""
        return self._memo("receipts", ("receipts",), self._receipts)

    def receipt_children(self) -> dict[str, list[str]]:
        """receipt id -> the ids of the receipts that name it as their parent."""
        def build() -> dict[str, list[str]]:
            out: dict[str, list[str]] = {}
            for r in self.receipts().values():
                if r.get("parent_receipt_id"):
                    out.setdefault(r["parent_receipt_id"], []).append(r["receipt_id"])
            return out
        return self._memo("receipt_children", ("receipts",), build)

    def _receipts(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for s in self._of("receipts"):
            journal = s.path.name.split(".journal")[0]
            for rec in s.records:
                rid = rec.data.get("receipt_id")
                if not isinstance(rid, str):
                    continue
                if rec.type == "start":
                    out.setdefault(rid, {**rec.data, "outcome": "running", "certainty": "unknown", "journal": journal,
                                         "start": True})
                    out[rid]["start_seq"] = rec.seq
                elif rec.type == "receipt":
                    started = out.get(rid, {})
                    out[rid] = {**rec.data, "journal": journal, "seq": rec.seq,
                                "start": bool(started.get("start")), "start_seq": started.get("start_seq")}
        return out

    # -- agent runs ---------------------------------------------------------------

    def agent_runs(self) -> dict[str, Any]:
        from openfunctions.agents import read_runs

        return self._memo("agent_runs", ("agent_runs",), lambda: self._read("agent runs", lambda: read_runs(self.root), {}))

    # -- workflow runs -----------------------------------------------------------

    def _workflows(self) -> Any:
        from openfunctions.workflows import WorkflowRuns

        return WorkflowRuns(self.root)

    def workflow_runs(self) -> list[dict[str, Any]]:
        if not (self.root / "workflows" / "runs.journal").exists():
            return []
        return self._memo("workflow_runs", ("workflow_runs",),
                          lambda: self._read("workflow runs", lambda: self._workflows().list(), []))

    def workflow_states(self) -> dict[str, Any]:
        """run id -> its folded state: what ``workflows show`` reads (``WorkflowRuns``' lock-free read), once."""
        if not (self.root / "workflows" / "runs.journal").exists():
            return {}
        return self._memo("workflow_states", ("workflow_runs",), lambda: self._read(
            "workflow runs", lambda: {k: v for k, v in self._workflows()._read().items() if v.status != "new"}, {}))

    def workflow_run(self, run_id: str) -> Any:
        state = self.workflow_states().get(run_id)
        return state if state is not None else self._workflows().show(run_id)  # show() raises the package's errors

    # -- work attempts -----------------------------------------------------------

    def work_state(self) -> Any:
        from openfunctions.work._recovery import replay

        def build() -> Any:
            records = [r for s in sorted(self._of("attempts"), key=lambda s: s.path.name) for r in s.records]
            return replay(records)
        return self._memo("work_state", ("attempts",), lambda: self._read("work attempts", build, replay([])))

    def _work_args(self) -> argparse.Namespace:
        """What ``work ... --data-dir D`` parses to: the work CLI's functions take it."""
        return argparse.Namespace(work_data_dir=str(self.root), work_database=None)

    def uncertain_operations(self) -> list[dict[str, Any]]:
        """``work list-uncertain``'s rows (the CLI's own code: live processes, pending resolutions)."""
        if not (self.root / "work" / "attempts").is_dir():
            return []
        from openfunctions.work import attempts_cli

        return self._read("work attempts", lambda: attempts_cli._uncertain(self._work_args()), [])

    # -- tasks and conversations -------------------------------------------------

    def tasks(self) -> list[dict[str, Any]]:
        return self._memo("tasks", ("tasks",), self._tasks)

    def _tasks(self) -> list[dict[str, Any]]:
        from dataclasses import asdict

        from openfunctions.servers._task_records import apply

        out = []
        for s in self._of("tasks"):
            state: dict[str, Any] = {}
            for rec in s.records:
                apply(state, rec.type, rec.data)
            journal = s.path.name.split(".tasks.journal")[0]
            out += [{**asdict(t), "journal": journal} for t in state.values()]
        return out

    def conversations(self) -> list[dict[str, Any]]:
        return self._memo("conversations", ("conversations",), self._conversations)

    def _conversations(self) -> list[dict[str, Any]]:
        from openfunctions.chat._conversations import apply

        out = []
        for s in self._of("conversations"):
            table: OrderedDict[str, Any] = OrderedDict()
            issued: dict[str, str] = {}
            used: dict[str, str] = {}
            for rec in s.records:
                try:
                    apply(table, rec.type, rec.data)
                except (KeyError, TypeError, ValueError):
                    continue  # the chat agent refuses such a file on open; the viewer shows what it can
                cid = rec.data.get("id")
                if isinstance(cid, str):
                    issued.setdefault(cid, rec.time)
                    used[cid] = rec.time
            agent = (s.meta or {}).get("agent") or s.path.name.split(".conversations.journal")[0]
            out += [{"conversation_id": c.id, "thread_id": c.thread_id, "principal": c.principal, "agent": agent,
                     "issued_at": issued.get(c.id), "used_at": used.get(c.id)} for c in table.values()]
        return out


#: Bytes of an artifact the page is shown (one verified read of the artifact store).
ARTIFACT_PREVIEW = 16 * 1024


def read_artifact(root: Path | None, artifact_id: str) -> dict[str, Any] | None:
    """The first :data:`ARTIFACT_PREVIEW` bytes of an artifact of the data dir's store, through the store's own
    verified read (the whole blob's SHA-256 is checked first), as text; None if the store or the artifact is not
    there. Opening the store runs its crash recovery, as every reader of it does."""
    import anyio

    from openfunctions.artifacts import ArtifactError, ArtifactStore, is_artifact_id

    if root is None or not is_artifact_id(artifact_id) or not (root / "artifacts" / "store.json").is_file():
        return None

    async def read() -> dict[str, Any] | None:
        store = ArtifactStore(root / "artifacts")
        try:
            chunk = await store.read(artifact_id, 0, ARTIFACT_PREVIEW)
        except ArtifactError as exc:
            if exc.code == "artifact_not_found":
                return None
            return {"artifact_id": artifact_id, "error": {"code": exc.code, "message": exc.message}}
        finally:
            store.close()
        return {"artifact_id": artifact_id, "size": chunk.total_size, "sha256": chunk.sha256,
                "media_type": chunk.media_type, "text": chunk.data.decode("utf-8", errors="replace"),
                "shown": chunk.length, "truncated": not chunk.eof}

    return anyio.run(read)


def resolve_commands(place: str, *, workflow_run: str | None = None, step: str | None = None,
                     operation: str | None = None) -> list[str]:
    """The exact CLI commands that resolve an uncertain workflow step or work operation (``place``: the
    ``--data-dir D`` or ``--database ...`` option)."""
    d = place
    if operation is not None:
        op = shlex.quote(operation)
        return [f"openfunctions-mcp work resolve {op} --as applied --reason 'WHAT YOU CHECKED' {d}",
                f"openfunctions-mcp work resolve {op} --as not-applied --reason 'WHAT YOU CHECKED' {d}"]
    assert workflow_run is not None and step is not None
    run, st = shlex.quote(workflow_run), shlex.quote(step)
    return [f"openfunctions-mcp workflows resolve {run} {st} --applied --result 'JSON' {d}",
            f"openfunctions-mcp workflows resolve {run} {st} --not-applied {d}"]


__all__ = ["ARTIFACT_PREVIEW", "MAX_ROWS", "MAX_STRING", "DataDir", "Stream", "bounded", "read_artifact", "resolve_commands"]
