"""Tasks from markdown task lists and todo.txt files as a context provider (``tasks:/path/to/dir``).

Read from every ``*.md`` and ``*.txt`` file under the root:

- markdown: ``- [ ] text`` (open) and ``- [x] text`` (done), also with ``*``
  or ``+`` bullets and indented; the nearest heading above is the task's
  ``section``;
- todo.txt (a file named ``todo.txt`` or ``*.todo.txt``): one task a line,
  ``x 2025-03-02 2025-03-01 text`` when done, ``(A)`` a priority.

In both, ``+project`` and ``@context`` tokens, and ``due:YYYY-MM-DD``, are
read from the text. A task's id is ``<file>:<line>:<hash>``, the hash being
the first 8 hex digits of the SHA-256 of the line: completing a task checks
the line still says the same, and finds it again if lines moved above it
(it refuses, code ``task_changed``, when the line was edited or is ambiguous).

Writes (``tasks_add``, ``tasks_complete``, declared ``effect: write``) replace
the file atomically (:func:`openfunctions.core.files.write_atomic`, keeping
its mode): a crash leaves the old file or the new one. A file another
program saved between our read and our write is not overwritten (its size
and mtime are compared just before the replace; the call is refused with
``task_changed``). A symlinked task file, or one in a hidden folder, is not
written. Reads are reviewed parallel-safe reads.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from openfunctions.core import ToolDefinition, tool
from openfunctions.core.files import write_atomic

from .._provider import ContextProvider, ProviderHealth
from ._base import NO_OUTPUT, READ, READ_ONLY, WRITE, WRITES, Connected, Limit100of1000
from ._root import NOT_FOUND, PATH_INVALID, PATH_OUTSIDE, Root, read_bounded, refuse

MAX_TASK_FILE_BYTES = 4 << 20
TASK_CHANGED = "task_changed"
TASK_ID_INVALID = "task_id_invalid"
TASK_ALREADY_DONE = "task_already_done"
_MD_RE = re.compile(r"^(\s*[-*+]\s+\[)([ xX])(\]\s+)(.*)$")
_HEADING_RE = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_TODO_DONE_RE = re.compile(r"^x\s+(?:(\d{4}-\d{2}-\d{2})\s+)?")
_PRIORITY_RE = re.compile(r"^\(([A-Z])\)\s+")
_DUE_RE = re.compile(r"(?:^|\s)due:(\d{4}-\d{2}-\d{2})\b")
_ID_RE = re.compile(r"^(.+):(\d{1,9}):([0-9a-f]{8})$")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def line_hash(line: str) -> str:
    return hashlib.sha256(line.rstrip("\r\n").encode("utf-8")).hexdigest()[:8]


def is_todo_txt(rel: str) -> bool:
    name = os.path.basename(rel).lower()
    return name == "todo.txt" or name.endswith(".todo.txt") or name == "done.txt"


@dataclass
class Task:
    id: str
    file: str
    line: int
    text: str
    done: bool
    section: str | None
    priority: str | None
    due: str | None
    projects: list[str]
    contexts: list[str]
    completed: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, [])} | {"done": self.done}


def _tokens(text: str) -> tuple[list[str], list[str], str | None]:
    words = text.split()
    projects = [w[1:] for w in words if w.startswith("+") and len(w) > 1]
    contexts = [w[1:] for w in words if w.startswith("@") and len(w) > 1]
    due = _DUE_RE.search(text)
    return projects, contexts, due.group(1) if due else None


def parse_tasks(rel: str, text: str) -> list[Task]:
    tasks = []
    section = None
    todo = is_todo_txt(rel)
    for n, line in enumerate(text.splitlines(), start=1):
        if todo:
            body = line.strip()
            if not body:
                continue
            done_m = _TODO_DONE_RE.match(body)
            done = done_m is not None
            completed = done_m.group(1) if done_m else None
            rest = body[done_m.end():] if done_m else body
            pri = _PRIORITY_RE.match(rest)
            priority = pri.group(1) if pri else None
            rest = rest[pri.end():] if pri else rest
            rest = re.sub(r"^\d{4}-\d{2}-\d{2}\s+", "", rest)  # creation date
            projects, contexts, due = _tokens(rest)
            tasks.append(Task(f"{rel}:{n}:{line_hash(line)}", rel, n, rest, done, None, priority, due, projects,
                              contexts, completed))
            continue
        h = _HEADING_RE.match(line)
        if h:
            section = h.group(1)
            continue
        m = _MD_RE.match(line)
        if m:
            body = m.group(4).strip()
            projects, contexts, due = _tokens(body)
            tasks.append(Task(f"{rel}:{n}:{line_hash(line)}", rel, n, body, m.group(2) != " ", section, None, due,
                              projects, contexts))
    return tasks


class TaskFiles:
    def __init__(self, root: Root, inbox: str | None) -> None:
        self.root = root
        self.inbox = inbox

    def all(self) -> list[Task]:
        out: list[Task] = []
        for path in self.root.walk((".md", ".txt"), limit=2000):
            text, _ = read_bounded(path, MAX_TASK_FILE_BYTES)
            out.extend(parse_tasks(self.root.relative(path), text))
        return out

    def default_file(self) -> str:
        if self.inbox:
            return self.inbox
        for name in ("todo.txt", "TODO.md", "tasks.md", "Tasks.md"):
            if os.path.isfile(os.path.join(self.root.real, name)):
                return name
        return "tasks.md"

    def writable(self, rel: str, *, must_exist: bool) -> Path:
        if not rel.lower().endswith((".md", ".txt")):
            raise refuse(PATH_INVALID, f"tasks are kept in .md or .txt files, not {rel!r}")
        # hidden folders (.git, .obsidian) are never written, as they are never listed
        real = self.root.resolve(rel, must_exist=must_exist, closed=lambda part: part.startswith(".") and part != ".")
        given = os.path.join(self.root.real, rel)
        if os.path.islink(given):
            raise refuse(PATH_INVALID, f"{rel!r} is a symlink: task files are written only where they are")
        if os.path.exists(real) and not os.path.isfile(real):
            raise refuse(PATH_INVALID, f"{rel!r} is not a file")
        if not real.parent.is_dir():
            raise refuse(NOT_FOUND, f"the folder of {rel!r} does not exist (tasks_add creates files, not folders)")
        return real

    @staticmethod
    def read_for_update(real: Path, rel: str) -> tuple[str, tuple[int, int] | None]:
        """The file's text and its (mtime, size) stamp, taken before reading; ``("", None)`` if it is absent."""
        try:
            st = os.stat(real)
        except FileNotFoundError:
            return "", None
        if st.st_size > MAX_TASK_FILE_BYTES:
            raise refuse("task_file_too_large", f"{rel!r} is over {MAX_TASK_FILE_BYTES} bytes")
        try:
            return real.read_text("utf-8"), (st.st_mtime_ns, st.st_size)
        except UnicodeDecodeError:
            raise refuse("task_file_unreadable", f"{rel!r} is not UTF-8 text") from None

    @staticmethod
    def replace(real: Path, rel: str, text: str, stamp: tuple[int, int] | None) -> None:
        """Write ``text`` over the file atomically, unless another program changed it since it was read."""
        try:
            st = os.stat(real)
            now: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            now = None
        if now != stamp:  # an editor saved meanwhile: writing would lose its change
            raise refuse(TASK_CHANGED, f"{rel!r} changed while it was being updated; list the tasks again")
        write_atomic(real, text.encode("utf-8"), mode=None)


def _today(now: Callable[[], dt.datetime]) -> str:
    return now().date().isoformat()


FileArg = Annotated[str, Field(max_length=1024, description="a task file relative to the tasks folder")]


def tasks_tools(files: TaskFiles, prefix: str, now: Callable[[], dt.datetime]) -> list[ToolDefinition]:
    @tool(f"{prefix}_list", capability=READ, annotations=READ_ONLY, tags=("tasks",), **NO_OUTPUT,
          tests=[{"name": "open only", "arguments": {"limit": 5},
                  "check": lambda r: not any(t["done"] for t in r["tasks"]) and len(r["tasks"]) <= 5}],
          description="List tasks (open by default) from the markdown task lists and todo.txt files; filter by "
                      "project (+tag or heading), file, text or due date. Each has an id for "
                      f"{prefix}_complete.")
    def list_tasks(status: Literal["open", "done", "all"] = "open",
                   project: Annotated[str, Field(max_length=200)] | None = None, file: FileArg | None = None,
                   query: Annotated[str, Field(max_length=200)] | None = None,
                   due_before: Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$")] | None = None,
                   limit: Limit100of1000 = 100) -> dict[str, Any]:
        rows = files.all()
        if status != "all":
            rows = [t for t in rows if t.done == (status == "done")]
        if project:
            want = project.lstrip("+").lower()
            rows = [t for t in rows if want in (x.lower() for x in t.projects) or (t.section or "").lower() == want]
        if file:
            rel = files.root.relative(files.root.resolve(file))
            rows = [t for t in rows if t.file == rel]
        if query:
            q = query.lower()
            rows = [t for t in rows if q in t.text.lower()]
        if due_before:
            rows = [t for t in rows if t.due is not None and t.due < due_before]
        rows.sort(key=lambda t: (t.due or "9999", t.priority or "Z", t.file, t.line))
        return {"status": status, "count": len(rows), "tasks": [t.to_dict() for t in rows[:limit]],
                "truncated": len(rows) > limit}

    @tool(f"{prefix}_add", capability=WRITE, annotations=WRITES, tags=("tasks",), **NO_OUTPUT,
          # refusals only: a case really calls the tool, and this one writes
          tests=[{"name": "traversal refused", "arguments": {"text": "x", "file": "../x.md"}, "error": PATH_OUTSIDE},
                 {"name": "bad due date refused", "arguments": {"text": "x", "due": "soon"},
                  "error": "task_due_invalid"}])
    def add(text: Annotated[str, Field(min_length=1, max_length=1000)], file: FileArg | None = None,
            project: Annotated[str, Field(pattern=r"^\+?[\w\-.]{1,64}$")] | None = None,
            due: Annotated[str, Field(max_length=10)] | None = None,
            priority: Annotated[str, Field(pattern="^[A-Z]$")] | None = None) -> dict[str, Any]:
        """Add an open task to a task file (default: todo.txt, TODO.md or tasks.md).

        Args:
            priority: todo.txt only
        """
        text = " ".join(text.split())
        if not text:
            raise refuse(PATH_INVALID, "a task needs some text")
        if project:
            proj = "+" + project.lstrip("+")
            if proj not in text.split():
                text += f" {proj}"
        if due:
            if not _DATE_RE.match(due):
                raise refuse("task_due_invalid", f"due {due!r} is not a date like 2025-03-01")
            text += f" due:{due}"
        rel = file or files.default_file()
        real = files.writable(rel, must_exist=False)
        existing, stamp = files.read_for_update(real, rel)
        if is_todo_txt(rel):
            pri = f"({priority}) " if priority else ""
            line = f"{pri}{_today(now)} {text}"
        else:
            line = f"- [ ] {text}"
        sep = "" if not existing or existing.endswith("\n") else "\n"
        files.replace(real, rel, existing + sep + line + "\n", stamp)
        n = (existing + sep).count("\n") + 1
        rel = files.root.relative(real)
        added = next(t for t in parse_tasks(rel, existing + sep + line + "\n") if t.line == n)
        return {"added": added.to_dict()}

    @tool(f"{prefix}_complete", capability=WRITE, annotations={**WRITES, "idempotent_hint": False}, tags=("tasks",),
          **NO_OUTPUT, description=f"Mark a task done by the id {prefix}_list gave it.",
          tests=[{"name": "malformed id refused", "arguments": {"id": "nonsense"}, "error": TASK_ID_INVALID}])
    def complete(id: Annotated[str, Field(min_length=1, max_length=1200)]) -> dict[str, Any]:
        m = _ID_RE.match(id)
        if not m:
            raise refuse(TASK_ID_INVALID, f"task id {id!r} is not '<file>:<line>:<hash>' (ids come from "
                                          f"{prefix}_list)")
        rel, n, h = m.group(1), int(m.group(2)), m.group(3)
        real = files.writable(rel, must_exist=True)
        text, stamp = files.read_for_update(real, rel)
        lines = text.splitlines(keepends=True)
        if not (1 <= n <= len(lines) and line_hash(lines[n - 1]) == h):
            same = [i + 1 for i, line in enumerate(lines) if line_hash(line) == h]
            if len(same) != 1:
                raise refuse(TASK_CHANGED, f"task {id!r}: the line was changed or removed since it was listed "
                                           f"({'several lines match' if same else 'no line matches'}); list again")
            n = same[0]
        line = lines[n - 1]
        ending = line[len(line.rstrip("\r\n")):]
        body = line.rstrip("\r\n")
        rel = files.root.relative(real)
        task = next((t for t in parse_tasks(rel, body + "\n") if t.line == 1), None)
        if task is None:
            raise refuse(NOT_FOUND, f"line {n} of {rel!r} is not a task")
        if task.done:
            raise refuse(TASK_ALREADY_DONE, f"task {id!r} is already done")
        if is_todo_txt(rel):
            new = f"x {_today(now)} {re.sub(r'^[(][A-Z][)] ', '', body.strip())}"
        else:
            mm = _MD_RE.match(body)
            assert mm is not None
            new = f"{mm.group(1)}x{mm.group(3)}{mm.group(4)}"
        lines[n - 1] = new + ending
        files.replace(real, rel, "".join(lines), stamp)
        done = parse_tasks(rel, new + "\n")[0]
        return {"completed": {**done.to_dict(), "id": f"{rel}:{n}:{line_hash(new)}", "line": n}}

    return [list_tasks, add, complete]


class TasksProvider(ContextProvider):
    """Task files under a folder. ``inbox``: the file new tasks go to; ``now``: a clock (completion dates)."""

    def __init__(self, root: str | os.PathLike[str], *, id: str = "tasks", prefix: str | None = None,
                 name: str | None = None, inbox: str | None = None,
                 now: Callable[[], dt.datetime] | None = None) -> None:
        super().__init__(id=id, name=name or "Tasks", domains=("tasks", "projects"),
                         description="Tasks from markdown task lists and todo.txt: list, add, complete")
        self.root = Root(root, what="tasks folder")
        self.inbox = inbox
        self.prefix = prefix or id
        self.now = now or dt.datetime.now

    async def connect(self) -> Connected:
        self.root.check()
        files = TaskFiles(self.root, self.inbox)
        return Connected(self, tasks_tools(files, self.prefix, self.now), lambda: _context(files, self.prefix),
                         lambda: _health(files, self.id))


def _context(files: TaskFiles, prefix: str) -> str:
    open_tasks = [t for t in files.all() if not t.done]
    open_tasks.sort(key=lambda t: (t.due or "9999", t.priority or "Z"))
    head = f"Tasks: {len(open_tasks)} open (tools {prefix}_list, {prefix}_add, {prefix}_complete)."
    return "\n".join([head, *(f"- {t.text}" + (f" (due {t.due})" if t.due else "") for t in open_tasks[:8])])


def _health(files: TaskFiles, pid: str) -> ProviderHealth:
    try:
        files.root.check()
        tasks = files.all()
    except Exception as exc:
        return ProviderHealth(pid, "down", getattr(exc, "message", str(exc)))
    if not os.access(files.root.real, os.W_OK):
        return ProviderHealth(pid, "degraded", "the tasks folder is not writable: add and complete will fail", tools=3)
    return ProviderHealth(pid, "up", tools=3, details={"tasks": len(tasks), "open": sum(not t.done for t in tasks)})


def tasks_provider(root: str | os.PathLike[str], **options: Any) -> TasksProvider:
    """The ``tasks`` entry point: ``tasks:/path/to/folder``."""
    return TasksProvider(root, **options)


__all__ = ["Task", "TasksProvider", "parse_tasks", "tasks_provider", "tasks_tools"]
