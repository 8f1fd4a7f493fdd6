"""Skills: instructions an agent loads when a task calls for them.

A skill is a markdown file with frontmatter (:mod:`._frontmatter`)::

    ---
    name: release-notes
    description: Write release notes from the changelog and the merged work
    tags: [writing, release]
    ---
    1. Read CHANGELOG.md's top section ...

``name`` (1-64 characters of letters, digits, ``_ . -``; default: the file
name without ``.md``) and ``description`` (required: it is what an agent
reads to decide) identify it; ``tags`` group it; other keys are kept as
``meta``. The body is the instruction text.

Skills come from directories (``serve --skills DIR``; every ``*.md`` below
it, hidden folders skipped) and from installed packages, through the
``openfunctions.skills`` entry-point group, whose object is a directory
(``str`` or ``Path``), a :class:`Skill`, an iterable of either, or a
zero-argument function returning one of those. A file that does not parse,
a skill without description, a second skill of the same name, or a broken
entry point is a :class:`SkillProblem` in :attr:`SkillSet.problems`: reported
and skipped, never fatal. Files over :data:`MAX_SKILL_BYTES` are skipped.

Served: every skill is an MCP prompt (:func:`install_skill_prompts`), and
:func:`skill_tools` gives agents ``skill_list`` and ``skill_load`` to find
and load one on demand; :func:`skills_prompt` is a short list for a system prompt.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import structlog
from pydantic import Field

from openfunctions.core import OpenFunctionsError, ToolDefinition, ToolError, tool

from ._frontmatter import FrontmatterError, split_frontmatter

log = structlog.get_logger("openfunctions.skills")

SKILLS_GROUP = "openfunctions.skills"
SKILL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
MAX_SKILL_BYTES = 256 << 10
MAX_SKILL_FILES = 2000
SKILL_NOT_FOUND = "skill_not_found"


class SkillError(OpenFunctionsError):
    """A skill file or source that cannot be used; ``code`` says why."""

    code = "skill_invalid"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code:
            self.code = code


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    body: str
    tags: tuple[str, ...] = ()
    source: str = "<python>"
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "tags": list(self.tags), "source": self.source}


@dataclass(frozen=True)
class SkillProblem:
    source: str
    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"source": self.source, "code": self.code, "message": self.message}


def parse_skill(text: str, *, source: str, default_name: str | None = None) -> Skill:
    """One skill from a markdown text; :class:`SkillError` (or ``FrontmatterError``) naming ``source`` if unusable."""
    fm, body = split_frontmatter(text, source=source)
    name = fm.pop("name", None) or default_name
    if not isinstance(name, str) or not SKILL_NAME_RE.match(name):
        raise SkillError(f"{source}: skill name {name!r} is invalid: use 1-64 characters of letters, digits, '_', "
                         "'.', '-'", code="skill_name_invalid")
    description = fm.pop("description", None)
    if not isinstance(description, str) or not description.strip():
        raise SkillError(f"{source}: the frontmatter has no 'description' (an agent reads it to choose the skill)",
                         code="skill_description_missing")
    tags = fm.pop("tags", None) or []
    if isinstance(tags, str):
        tags = [t.strip() for t in tags.split(",") if t.strip()]
    if not isinstance(tags, list) or not all(isinstance(t, (str, int)) for t in tags):
        raise SkillError(f"{source}: 'tags' must be a list of words", code="skill_tags_invalid")
    if not body.strip():
        raise SkillError(f"{source}: the skill has no instructions after its frontmatter", code="skill_body_empty")
    return Skill(name, description.strip(), body.strip() + "\n", tuple(str(t) for t in tags), source, fm)


class SkillSet:
    """Skills by name, in load order, and the problems met loading them."""

    def __init__(self) -> None:
        self.skills: dict[str, Skill] = {}
        self.problems: list[SkillProblem] = []

    def __len__(self) -> int:
        return len(self.skills)

    def __iter__(self) -> Any:
        return iter(self.skills.values())

    def get(self, name: str) -> Skill:
        try:
            return self.skills[name]
        except KeyError:
            raise SkillError(f"no skill named {name!r}; known: {', '.join(sorted(self.skills)) or 'none'}",
                             code=SKILL_NOT_FOUND) from None

    def problem(self, source: str, code: str, message: str) -> None:
        self.problems.append(SkillProblem(source, code, message))
        log.warning("skill_skipped", source=source, code=code, reason=message)

    def add(self, skill: Skill) -> None:
        first = self.skills.get(skill.name)
        if first is not None:
            self.problem(skill.source, "skill_duplicate",
                         f"a skill named {skill.name!r} was already loaded from {first.source}; this one is skipped")
            return
        self.skills[skill.name] = skill

    def add_file(self, path: Path) -> None:
        source = str(path)
        try:
            if path.stat().st_size > MAX_SKILL_BYTES:
                raise SkillError(f"{source}: over {MAX_SKILL_BYTES} bytes", code="skill_too_large")
            text = path.read_text("utf-8")
            self.add(parse_skill(text, source=source, default_name=path.stem))
        except (SkillError, FrontmatterError) as exc:
            self.problem(source, exc.code, exc.message)
        except (OSError, UnicodeDecodeError) as exc:
            self.problem(source, "skill_unreadable", f"{source}: {type(exc).__name__}: {exc}")

    def add_dir(self, directory: str | os.PathLike[str]) -> None:
        root = Path(directory)
        if not root.is_dir():
            self.problem(str(root), "skill_dir_missing", f"skills directory {str(root)!r} does not exist")
            return
        count = 0
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.startswith(".") or not name.lower().endswith(".md") or name.upper() == "README.MD":
                    continue
                count += 1
                if count > MAX_SKILL_FILES:
                    self.problem(str(root), "skill_dir_too_large", f"over {MAX_SKILL_FILES} skill files; the rest skipped")
                    return
                self.add_file(Path(dirpath) / name)

    def add_object(self, obj: Any, source: str) -> None:
        """A skill source from Python (an entry point's object): a directory, a Skill, an iterable, a factory."""
        if callable(obj) and not isinstance(obj, (Skill, str, os.PathLike)):
            obj = obj()
        if isinstance(obj, Skill):
            self.add(obj)
        elif isinstance(obj, (str, os.PathLike)):
            self.add_dir(obj)
        elif isinstance(obj, Iterable):
            for item in obj:
                self.add_object(item, source)
        else:
            self.problem(source, "skill_source_invalid",
                         f"{source}: expected a directory, a Skill or a list of them, got {type(obj).__name__}")


def load_skills(dirs: Iterable[str | os.PathLike[str]] = (), *, entry_points: bool = True) -> SkillSet:
    """The skills of ``dirs`` (in order), then of the installed ``openfunctions.skills`` entry points."""
    out = SkillSet()
    for d in dirs:
        out.add_dir(d)
    if entry_points:
        from openfunctions.core.entry_points import load_group

        for plugin, obj in load_group(SKILLS_GROUP):
            if plugin.error is not None:
                out.problem(plugin.label, "plugin_broken", plugin.error)
                continue
            try:
                out.add_object(obj, plugin.label)
            except Exception as exc:  # a factory that raises is one broken plugin, not a failed start
                out.problem(plugin.label, "plugin_broken", f"{plugin.label}: {type(exc).__name__}: {exc}")
    return out


def skills_prompt(skills: SkillSet, *, tool: str = "skill_load") -> str:
    """A short system-prompt block listing the skills and how to load one."""
    if not len(skills):
        return ""
    lines = [f"Skills (load one with {tool} before a task it fits):"]
    lines += [f"- {s.name}: {s.description}" for s in skills]
    return "\n".join(lines)


def skill_tools(skills: SkillSet) -> list[ToolDefinition]:
    """``skill_list`` and ``skill_load``: the agent's way to find and load a skill on demand."""

    common: dict[str, Any] = {"capability": {"effect": "read", "parallel_safe": True},
                              "annotations": {"read_only_hint": True, "open_world_hint": False},
                              "tags": ("skills",), "blocking": False, "output_schema": None}

    @tool("skill_list", **common)
    def list_skills(tag: Annotated[str, Field(max_length=64)] | None = None) -> dict[str, Any]:
        """List the skills (instruction sets for particular tasks) you can load with skill_load."""
        rows = [s.summary() for s in skills if tag is None or tag in s.tags]
        return {"count": len(rows), "skills": [{k: r[k] for k in ("name", "description", "tags")} for r in rows]}

    @tool("skill_load", **common)
    def load(name: Annotated[str, Field(min_length=1, max_length=64)]) -> dict[str, Any]:
        """Load a skill's instructions by name (see skill_list); follow them for the task."""
        try:
            s = skills.get(name)
        except SkillError as exc:
            raise ToolError(exc.message, code=exc.code, refused=True) from None
        return {"name": s.name, "description": s.description, "tags": list(s.tags), "instructions": s.body}

    return [list_skills, load]


def install_skill_prompts(server: Any, skills: SkillSet) -> None:
    """Serve every skill as an MCP prompt of the same name, with an optional ``request`` argument appended."""
    for s in skills:
        def render(args: dict[str, str], _s: Skill = s) -> str:
            request = (args.get("request") or "").strip()
            return _s.body.rstrip() + f"\n\nRequest: {request}\n" if request else _s.body

        server.add_prompt(s.name, s.description,
                          [{"name": "request", "description": "what to apply the skill to (optional)",
                            "required": False}], render)


__all__ = [
    "MAX_SKILL_BYTES", "SKILLS_GROUP", "Skill", "SkillError", "SkillProblem", "SkillSet", "install_skill_prompts",
    "load_skills", "parse_skill", "skill_tools", "skills_prompt",
]
