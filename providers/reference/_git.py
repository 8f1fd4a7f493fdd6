"""A git repository as a context provider (``git:/path/to/repo``): files, grep, log, blame.

Everything runs the ``git`` command line in a subprocess: with a time limit
(:data:`GIT_TIMEOUT_S`, then killed), its output read up to
:data:`MAX_OUTPUT_BYTES` (then killed and marked truncated), no terminal
prompt, no pager, and settings that keep a repository's own configuration
from running programs (``core.fsmonitor``, ``diff.external``, textconv
drivers are switched off for these commands). Paths are relative to the
repository root and confined to it (:mod:`._root`); revisions must look like
revisions (no leading ``-``), and patterns are passed after ``-e``, so no
argument can become an option.

Tools (prefix ``git`` by default): ``git_files``, ``git_read``, ``git_grep``,
``git_log``, ``git_blame``; all reviewed parallel-safe reads.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from typing import Any

from openfunctions.core import ToolDefinition, ToolError, define_tool

from .._errors import ProviderUnavailable
from .._provider import ContextProvider, ProviderHealth
from ._base import READ, READ_ONLY, Connected, limit_schema
from ._root import PATH_OUTSIDE, Root, clip, read_bounded, refuse

GIT_TIMEOUT_S = 15.0
MAX_OUTPUT_BYTES = 2 << 20
MAX_FILE_BYTES = 256 << 10
REV_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-/~^@{}]{0,199}$")
GIT_FAILED = "git_command_failed"
GIT_TIMEOUT = "git_timeout"
REV_INVALID = "git_revision_invalid"

# A repository is data we did not write: its .git/config must not make these read commands run programs.
_SAFE_CONFIG = ("-c", "core.fsmonitor=false", "-c", "core.pager=cat", "-c", "diff.external=",
                "-c", "core.hooksPath=/dev/null", "-c", "protocol.allow=never")


def run_git(cwd: str, args: list[str], *, timeout: float = GIT_TIMEOUT_S,
            max_bytes: int = MAX_OUTPUT_BYTES) -> tuple[str, bool]:
    """``git args`` in ``cwd``: (stdout up to ``max_bytes``, whether it was cut). Raises ToolError on failure."""
    git = shutil.which("git")
    if git is None:
        raise ToolError("the git command is not installed", code=GIT_FAILED, refused=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1", LC_ALL="C", GIT_OPTIONAL_LOCKS="0")
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([git, "--no-pager", *_SAFE_CONFIG, *args], cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=err, env=env)
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            assert proc.stdout is not None
            out = proc.stdout.read(max_bytes + 1)
            cut = len(out) > max_bytes
            if cut:
                proc.kill()
            proc.stdout.close()
            rc = proc.wait()
        finally:
            timer.cancel()
        if timed_out.is_set():
            raise ToolError(f"git {args[0]} took over {timeout:g} s and was stopped", code=GIT_TIMEOUT,
                            effect_happened=False)
        if rc != 0 and not cut:
            err.seek(0)
            msg = err.read(2000).decode("utf-8", "replace").strip()
            raise ToolError(f"git {args[0]} failed: {msg or f'exit status {rc}'}", code=GIT_FAILED,
                            effect_happened=False)
    return out[:max_bytes].decode("utf-8", "replace"), cut


def _is_git_dir(part: str) -> bool:
    return part == ".git"


def _rev(value: Any) -> str:
    if value is None:
        return "HEAD"
    if not isinstance(value, str) or not REV_RE.match(value) or ".." in value:
        raise refuse(REV_INVALID, f"revision {value!r} is not a branch, tag or commit name (no ranges, no options)")
    return value


def git_tools(root: Root, prefix: str) -> list[ToolDefinition]:
    def git(args: list[str], **kw: Any) -> tuple[str, bool]:
        return run_git(root.real, args, **kw)

    def resolve(path: str, *, must_exist: bool = True) -> Any:
        return root.resolve(path, must_exist=must_exist, closed=_is_git_dir)

    def rel_arg(path: str | None) -> str | None:
        if not path:
            return None
        return root.relative(resolve(path))

    def files(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        args = ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]
        sub = rel_arg(p.get("path"))
        if sub and sub != ".":
            args += ["--", sub]
        out, cut = git(args)
        names = [n for n in out.split("\0") if n]
        pattern = p.get("contains")
        if pattern:
            names = [n for n in names if pattern.lower() in n.lower()]
        limit = p.get("limit", 200)
        return {"count": len(names), "files": names[:limit], "truncated": cut or len(names) > limit}

    def read(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        rel = root.relative(resolve(p["path"], must_exist=p.get("rev") is None))
        start, end = p.get("start_line", 1), p.get("end_line")
        if p.get("rev") is None:
            real = resolve(p["path"])
            if not real.is_file():
                raise refuse("reference_not_a_file", f"{p['path']!r} is not a file")
            text, cut = read_bounded(real, MAX_FILE_BYTES)
        else:
            text, cut = git(["show", "--no-textconv", f"{_rev(p['rev'])}:{rel}"], max_bytes=MAX_FILE_BYTES)
        lines = text.splitlines()
        chosen = lines[start - 1 : end]
        body, clipped = clip("\n".join(chosen), 60_000)
        return {"path": rel, "rev": p.get("rev"), "start_line": start, "lines": len(lines), "content": body,
                "truncated": cut or clipped}

    def grep(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        args = ["grep", "-n", "-I", "--no-color", "--no-textconv", "--full-name"]
        if p.get("ignore_case"):
            args.append("-i")
        args.append("-F" if not p.get("regex") else "-E")
        args += ["-e", p["pattern"]]
        sub = rel_arg(p.get("path"))
        if sub and sub != ".":
            args += ["--", sub]
        try:
            out, cut = git(args, max_bytes=512 << 10)
        except ToolError as exc:
            if "exit status 1" in exc.message:  # git grep: 1 means "no match"
                out, cut = "", False
            else:
                raise
        limit = p.get("limit", 50)
        matches = []
        for line in out.splitlines():
            path, _, rest = line.partition(":")
            num, _, text = rest.partition(":")
            if num.isdigit():
                matches.append({"path": path, "line": int(num), "text": clip(text.strip(), 300)[0]})
        return {"pattern": p["pattern"], "count": len(matches), "matches": matches[:limit],
                "truncated": cut or len(matches) > limit}

    def log(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        limit = p.get("limit", 20)
        args = ["log", "--no-textconv", f"--max-count={limit}", "--date=iso-strict",
                "--format=%H%x1f%an%x1f%ae%x1f%ad%x1f%s%x1e", _rev(p.get("rev"))]
        sub = rel_arg(p.get("path"))
        if sub and sub != ".":
            args += ["--", sub]
        out, cut = git(args)
        commits = []
        for rec in out.split("\x1e"):
            parts = rec.strip("\n").split("\x1f")
            if len(parts) == 5:
                commits.append({"commit": parts[0], "author": parts[1], "email": parts[2], "date": parts[3],
                                "subject": parts[4]})
        return {"count": len(commits), "commits": commits, "truncated": cut}

    def blame(p: dict[str, Any], ctx: Any) -> dict[str, Any]:
        rel = root.relative(resolve(p["path"]))
        start = p.get("start_line", 1)
        end = p.get("end_line") or start + 49
        if end < start:
            raise refuse("reference_range_invalid", f"end_line {end} is before start_line {start}")
        end = min(end, start + 499)
        out, cut = git(["blame", "--porcelain", "--no-textconv", "-L", f"{start},{end}", _rev(p.get("rev")),
                        "--", rel])
        lines: list[dict[str, Any]] = []
        meta: dict[str, dict[str, str]] = {}
        current: dict[str, Any] = {}
        for line in out.splitlines():
            if line.startswith("\t"):
                c = meta.setdefault(current["commit"], {})
                lines.append({"line": current["line"], "commit": current["commit"], "author": c.get("author"),
                              "time": int(c["author-time"]) if c.get("author-time", "").isdigit() else None,
                              "summary": c.get("summary"), "text": line[1:]})
                continue
            head = line.split(" ")
            if len(head) >= 3 and re.fullmatch(r"[0-9a-f]{40}", head[0]):
                current = {"commit": head[0], "line": int(head[2])}
                continue
            key, _, value = line.partition(" ")
            if current and key in ("author", "author-time", "summary"):
                meta.setdefault(current["commit"], {})[key] = value
        return {"path": rel, "lines": lines, "truncated": cut}

    def schema(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
        return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False}

    path = {"type": "string", "maxLength": 1024, "description": "a path relative to the repository root"}
    rev = {"type": "string", "maxLength": 200, "description": "a branch, tag or commit (default: HEAD)"}
    line = {"type": "integer", "minimum": 1, "maximum": 10_000_000}
    common: dict[str, Any] = {"capability": READ, "annotations": READ_ONLY, "tags": ("codebase",)}
    return [
        define_tool(name=f"{prefix}_files", handler=files, **common,
                    tests=[{"name": "limit bounds the list", "arguments": {"limit": 1},
                            "check": lambda r: len(r["files"]) <= 1}],
                    description="List the repository's files (tracked and untracked, .gitignore respected), "
                                "optionally under a folder or with names containing a text.",
                    input_schema=schema({"path": path, "contains": {"type": "string", "maxLength": 200},
                                         "limit": limit_schema(200, 5000)})),
        define_tool(name=f"{prefix}_read", handler=read, **common,
                    tests=[{"name": "traversal refused", "arguments": {"path": "../x"}, "error": PATH_OUTSIDE},
                           {"name": "option as revision refused", "arguments": {"path": "x", "rev": "--output=/tmp/x"},
                            "error": REV_INVALID}],
                    description="Read a file of the repository (the working tree, or as of a revision), "
                                "optionally a line range.",
                    input_schema=schema({"path": path, "rev": rev, "start_line": {**line, "default": 1},
                                         "end_line": line}, ("path",))),
        define_tool(name=f"{prefix}_grep", handler=grep, **common,
                    tests=[{"name": "a pattern is never an option", "arguments": {"pattern": "--no-index-\u2400"},
                            "match": {"count": 0}},
                           {"name": "path outside refused", "arguments": {"pattern": "x", "path": "/etc"},
                            "error": PATH_OUTSIDE}],
                    description="Search the repository's files for a text (or an extended regex with regex=true); "
                                "returns path, line number and line.",
                    input_schema=schema({"pattern": {"type": "string", "minLength": 1, "maxLength": 500},
                                         "path": path, "regex": {"type": "boolean", "default": False},
                                         "ignore_case": {"type": "boolean", "default": False},
                                         "limit": limit_schema(50, 1000)}, ("pattern",))),
        define_tool(name=f"{prefix}_log", handler=log, **common,
                    tests=[{"name": "ranges refused", "arguments": {"rev": "HEAD..HEAD"}, "error": REV_INVALID}],
                    description="Recent commits (hash, author, date, subject), optionally only those touching a path.",
                    input_schema=schema({"path": path, "rev": rev, "limit": limit_schema(20, 500)})),
        define_tool(name=f"{prefix}_blame", handler=blame, **common,
                    tests=[{"name": "traversal refused", "arguments": {"path": "../x"}, "error": PATH_OUTSIDE}],
                    description="Who last changed each line of a file (up to 500 lines from start_line): "
                                "commit, author, time, summary.",
                    input_schema=schema({"path": path, "rev": rev, "start_line": {**line, "default": 1},
                                         "end_line": line}, ("path",))),
    ]


class GitProvider(ContextProvider):
    """A git working tree (or a bare clone's top level). ``prefix`` names the tools."""

    def __init__(self, root: str | os.PathLike[str], *, id: str = "git", prefix: str | None = None,
                 name: str | None = None) -> None:
        super().__init__(id=id, name=name or f"Repository {os.path.basename(os.path.abspath(root))}",
                         domains=("codebase",), description="A git repository: files, grep, log, blame")
        self.root = Root(root, what="repository")
        self.prefix = prefix or id

    async def connect(self) -> Connected:
        self.root.check()
        try:
            top, _ = run_git(self.root.real, ["rev-parse", "--show-toplevel"])
        except ToolError as exc:
            raise ProviderUnavailable(f"{self.root.given!r} is not a git repository: {exc.message}") from None
        if os.path.realpath(top.strip()) != self.root.real:
            raise ProviderUnavailable(f"{self.root.given!r} is inside a repository whose root is {top.strip()!r}: "
                                      "give the repository root")
        return Connected(self, git_tools(self.root, self.prefix), lambda: _context(self.root, self.prefix),
                         lambda: _health(self.root, self.id))


def _context(root: Root, prefix: str) -> str:
    branch, _ = run_git(root.real, ["rev-parse", "--abbrev-ref", "HEAD"])
    files, _ = run_git(root.real, ["ls-files", "-z"])
    lines = [f"Repository {os.path.basename(root.real)!r} on branch {branch.strip()}: "
             f"{sum(1 for f in files.split(chr(0)) if f)} tracked files "
             f"(tools {prefix}_files, {prefix}_grep, {prefix}_read, {prefix}_log, {prefix}_blame)."]
    try:
        log, _ = run_git(root.real, ["log", "--max-count=3", "--format=%h %s (%an, %ad)", "--date=short"])
    except ToolError:  # a repository without commits
        log = ""
    if log.strip():
        lines.append("Latest commits:\n" + "\n".join(f"- {line}" for line in log.strip().splitlines()))
    return "\n".join(lines)


def _health(root: Root, pid: str) -> ProviderHealth:
    try:
        root.check()
        head, _ = run_git(root.real, ["rev-parse", "--verify", "--quiet", "HEAD"])
    except ToolError as exc:
        return ProviderHealth(pid, "degraded", f"no commits yet or git failed: {exc.message}", tools=5)
    except Exception as exc:
        return ProviderHealth(pid, "down", getattr(exc, "message", str(exc)))
    return ProviderHealth(pid, "up", tools=5, details={"head": head.strip()})


def git_provider(root: str | os.PathLike[str], **options: Any) -> GitProvider:
    """The ``git`` entry point: ``git:/path/to/repo``."""
    return GitProvider(root, **options)


__all__ = ["GitProvider", "git_provider", "git_tools", "run_git"]
