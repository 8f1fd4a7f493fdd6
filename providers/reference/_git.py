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
import signal
import subprocess
import tempfile
import threading
from typing import Annotated, Any

from pydantic import Field

from openfunctions.core import ToolDefinition, ToolError, tool

from .._errors import ProviderUnavailable
from .._provider import ContextProvider, ProviderHealth
from ._base import NO_OUTPUT, READ, READ_ONLY, Connected, Limit20of500, Limit50of1000, Limit200of5000
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
                                stdout=subprocess.PIPE, stderr=err, env=env, start_new_session=True)
        timed_out = threading.Event()

        def kill() -> None:
            # The whole group: what git started (an alias's shell, a hook, ssh) would otherwise run on,
            # and hold our stdout open past the timeout.
            timed_out.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

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


PathArg = Annotated[str, Field(max_length=1024, description="a path relative to the repository root")]
RevArg = Annotated[str, Field(max_length=200, description="a branch, tag or commit (default: HEAD)")]
LineArg = Annotated[int, Field(ge=1, le=10_000_000)]


def git_tools(root: Root, prefix: str) -> list[ToolDefinition]:
    def git(args: list[str], **kw: Any) -> tuple[str, bool]:
        return run_git(root.real, args, **kw)

    def resolve(path: str, *, must_exist: bool = True) -> Any:
        return root.resolve(path, must_exist=must_exist, closed=_is_git_dir)

    def rel_arg(path: str | None) -> str | None:
        if not path:
            return None
        return root.relative(resolve(path))

    common: dict[str, Any] = {"capability": READ, "annotations": READ_ONLY, "tags": ("codebase",), **NO_OUTPUT}

    @tool(f"{prefix}_files", **common,
          tests=[{"name": "limit bounds the list", "arguments": {"limit": 1}, "check": lambda r: len(r["files"]) <= 1}])
    def files(path: PathArg | None = None, contains: Annotated[str, Field(max_length=200)] | None = None,
              limit: Limit200of5000 = 200) -> dict[str, Any]:
        """List the repository's files (tracked and untracked, .gitignore respected), optionally under a folder or
        with names containing a text."""
        args = ["ls-files", "-z", "--cached", "--others", "--exclude-standard"]
        sub = rel_arg(path)
        if sub and sub != ".":
            args += ["--", sub]
        out, cut = git(args)
        names = [n for n in out.split("\0") if n]
        if contains:
            names = [n for n in names if contains.lower() in n.lower()]
        return {"count": len(names), "files": names[:limit], "truncated": cut or len(names) > limit}

    @tool(f"{prefix}_read", **common,
          tests=[{"name": "traversal refused", "arguments": {"path": "../x"}, "error": PATH_OUTSIDE},
                 {"name": "option as revision refused", "arguments": {"path": "x", "rev": "--output=/tmp/x"},
                  "error": REV_INVALID}])
    def read(path: PathArg, rev: RevArg | None = None, start_line: LineArg = 1,
             end_line: LineArg | None = None) -> dict[str, Any]:
        """Read a file of the repository (the working tree, or as of a revision), optionally a line range."""
        rel = root.relative(resolve(path, must_exist=rev is None))
        start, end = start_line, end_line
        if rev is None:
            real = resolve(path)
            if not real.is_file():
                raise refuse("reference_not_a_file", f"{path!r} is not a file")
            text, cut = read_bounded(real, MAX_FILE_BYTES)
        else:
            text, cut = git(["show", "--no-textconv", f"{_rev(rev)}:{rel}"], max_bytes=MAX_FILE_BYTES)
        lines = text.splitlines()
        chosen = lines[start - 1 : end]
        body, clipped = clip("\n".join(chosen), 60_000)
        return {"path": rel, "rev": rev, "start_line": start, "lines": len(lines), "content": body,
                "truncated": cut or clipped}

    @tool(f"{prefix}_grep", **common,
          tests=[{"name": "a pattern is never an option", "arguments": {"pattern": "--no-index-\u2400"},
                  "match": {"count": 0}},
                 {"name": "path outside refused", "arguments": {"pattern": "x", "path": "/etc"}, "error": PATH_OUTSIDE}])
    def grep(pattern: Annotated[str, Field(min_length=1, max_length=500)], path: PathArg | None = None,
             regex: bool = False, ignore_case: bool = False, limit: Limit50of1000 = 50) -> dict[str, Any]:
        """Search the repository's files for a text (or an extended regex with regex=true); returns path, line
        number and line."""
        args = ["grep", "-n", "-I", "--no-color", "--no-textconv", "--full-name"]
        if ignore_case:
            args.append("-i")
        args.append("-F" if not regex else "-E")
        args += ["-e", pattern]
        sub = rel_arg(path)
        if sub and sub != ".":
            args += ["--", sub]
        try:
            out, cut = git(args, max_bytes=512 << 10)
        except ToolError as exc:
            if "exit status 1" in exc.message:  # git grep: 1 means "no match"
                out, cut = "", False
            else:
                raise
        matches = []
        for line in out.splitlines():
            found, _, rest = line.partition(":")
            num, _, text = rest.partition(":")
            if num.isdigit():
                matches.append({"path": found, "line": int(num), "text": clip(text.strip(), 300)[0]})
        return {"pattern": pattern, "count": len(matches), "matches": matches[:limit],
                "truncated": cut or len(matches) > limit}

    @tool(f"{prefix}_log", **common,
          tests=[{"name": "ranges refused", "arguments": {"rev": "HEAD..HEAD"}, "error": REV_INVALID}])
    def log(path: PathArg | None = None, rev: RevArg | None = None, limit: Limit20of500 = 20) -> dict[str, Any]:
        """Recent commits (hash, author, date, subject), optionally only those touching a path."""
        args = ["log", "--no-textconv", f"--max-count={limit}", "--date=iso-strict",
                "--format=%H%x1f%an%x1f%ae%x1f%ad%x1f%s%x1e", _rev(rev)]
        sub = rel_arg(path)
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

    @tool(f"{prefix}_blame", **common,
          tests=[{"name": "traversal refused", "arguments": {"path": "../x"}, "error": PATH_OUTSIDE}])
    def blame(path: PathArg, rev: RevArg | None = None, start_line: LineArg = 1,
              end_line: LineArg | None = None) -> dict[str, Any]:
        """Who last changed each line of a file (up to 500 lines from start_line): commit, author, time, summary."""
        rel = root.relative(resolve(path))
        start = start_line
        end = end_line or start + 49
        if end < start:
            raise refuse("reference_range_invalid", f"end_line {end} is before start_line {start}")
        end = min(end, start + 499)
        out, cut = git(["blame", "--porcelain", "--no-textconv", "-L", f"{start},{end}", _rev(rev),
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

    return [files, read, grep, log, blame]


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
