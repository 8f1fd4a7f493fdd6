"""An Obsidian-style markdown vault as a context provider (``vault:/path/to/vault``).

A note is a ``*.md`` file below the vault root (hidden folders such as
``.obsidian`` and ``.trash`` are skipped). What a note carries:

- frontmatter (``---`` block, :func:`openfunctions.skills.split_frontmatter`):
  ``title``, ``tags``, ``aliases``, ``type`` (``person``, ``project``, ...),
  ``people`` and ``projects`` (or ``project``) lists;
- wikilinks ``[[Target]]``, ``[[Target|shown text]]``, ``[[Target#Heading]]``,
  resolved as Obsidian does: a path (``folder/Note``) or a note name,
  case-insensitive, the shortest path winning a tie; ``aliases`` count too;
- tags: the frontmatter ``tags`` and inline ``#tag`` / ``#area/sub`` outside
  code (a heading's ``# `` is not a tag).

Tools (prefix ``vault`` by default): ``vault_list``, ``vault_read``,
``vault_search``, ``vault_backlinks``, ``vault_tags``, ``vault_people``,
``vault_projects``. All are reviewed parallel-safe reads. A note whose
frontmatter does not parse is still a note (body only) and its problem is
listed by ``vault_read`` and ``health()``. Notes are parsed once per
(size, mtime) and cached; at most :data:`MAX_NOTES` notes of at most
:data:`MAX_NOTE_BYTES` each are read.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from openfunctions.core import ToolDefinition, tool
from openfunctions.skills import FrontmatterError, split_frontmatter

from .._provider import ContextProvider, ProviderHealth, Status
from ._base import NO_OUTPUT, READ, READ_ONLY, Connected, Limit20of200, Limit50of500, Limit100of1000
from ._root import NOT_FOUND, PATH_OUTSIDE, Root, clip, read_bounded, refuse

MAX_NOTES = 20_000
MAX_NOTE_BYTES = 1 << 20
MAX_CONTENT_CHARS = 40_000
MAX_FRONTMATTER_CHARS = 20_000
_WIKILINK_RE = re.compile(r"\[\[([^\[\]|#\n]+)(?:#[^\[\]|\n]*)?(?:\|[^\[\]\n]*)?\]\]")
_TAG_RE = re.compile(r"(?:(?<=\s)|^)#([A-Za-z_][\w\-/]*)")
_FENCE_RE = re.compile(r"^\s*(```|~~~)")


@dataclass
class Note:
    path: str  # relative, posix
    title: str
    frontmatter: dict[str, Any]
    body: str
    truncated: bool
    tags: list[str]
    links: list[str]  # raw targets
    problem: str | None = None
    mtime: float = 0.0
    lines: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.path[:-3] if self.path.lower().endswith(".md") else self.path


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v).strip() for v in value if v is not None and str(v).strip()]
    return [s.strip() for s in str(value).split(",") if s.strip()]


def _strip_link(text: str) -> str:
    m = _WIKILINK_RE.fullmatch(text.strip())
    return m.group(1).strip() if m else text.strip()


def _inline_tags(body: str) -> list[str]:
    tags: list[str] = []
    in_code = False
    for line in body.splitlines():
        if _FENCE_RE.match(line):
            in_code = not in_code
            continue
        if in_code:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        tags.extend(_TAG_RE.findall(line))
    return tags


def parse_note(rel: str, text: str, truncated: bool, mtime: float = 0.0) -> Note:
    problem = None
    try:
        fm, body = split_frontmatter(text, source=rel)
    except FrontmatterError as exc:
        fm, body, problem = {}, text, exc.message
    tags = [t.lstrip("#") for t in _as_list(fm.get("tags"))] + _inline_tags(body)
    title = str(fm.get("title") or Path(rel).stem)
    links = [m.group(1).strip() for m in _WIKILINK_RE.finditer(body)]
    for key in ("people", "projects", "project"):
        links.extend(_strip_link(v) for v in _as_list(fm.get(key)) if "[[" in v)
    return Note(rel, title, fm, body, truncated, sorted(set(tags), key=str.lower), links, problem, mtime,
                body.splitlines())


class Vault:
    """The parsed notes of one vault directory (re-read when a file's size or mtime changes)."""

    def __init__(self, root: Root) -> None:
        self.root = root
        self._cache: dict[str, tuple[tuple[int, int], Note]] = {}

    def notes(self) -> list[Note]:
        seen: dict[str, Note] = {}
        for path in self.root.walk((".md",), limit=MAX_NOTES):
            rel = self.root.relative(path)
            try:
                st = path.stat()
            except OSError:
                continue
            stamp = (st.st_size, st.st_mtime_ns)
            hit = self._cache.get(rel)
            if hit is None or hit[0] != stamp:
                text, cut = read_bounded(path, MAX_NOTE_BYTES)
                hit = (stamp, parse_note(rel, text, cut, st.st_mtime))
                self._cache[rel] = hit
            seen[rel] = hit[1]
        for gone in set(self._cache) - set(seen):
            del self._cache[gone]
        return list(seen.values())

    @staticmethod
    def index(notes: list[Note]) -> dict[str, list[Note]]:
        """Lower-cased name, path and alias -> notes (shortest path first)."""
        idx: dict[str, list[Note]] = {}
        for n in sorted(notes, key=lambda n: (len(n.path), n.path)):
            names = {n.key.lower(), Path(n.key).name.lower(), n.title.lower()}
            names |= {a.lower() for a in _as_list(n.frontmatter.get("aliases"))}
            for name in names:
                idx.setdefault(name, []).append(n)
        return idx

    @staticmethod
    def resolve_link(target: str, idx: dict[str, list[Note]]) -> Note | None:
        key = target.strip().lower()
        key = key[:-3] if key.endswith(".md") else key
        hits = idx.get(key)
        return hits[0] if hits else None

    def find(self, name: str, notes: list[Note] | None = None) -> Note:
        notes = self.notes() if notes is None else notes
        if name.lower().endswith(".md") or "/" in name:
            self.root.resolve(name if name.lower().endswith(".md") else name + ".md")  # confinement check
        note = self.resolve_link(name, self.index(notes))
        if note is None:
            raise refuse(NOT_FOUND, f"no note {name!r} in the vault (give a path like 'folder/Note.md' or a note name)",
                         note=name)
        return note


def _summary(n: Note) -> dict[str, Any]:
    return {"path": n.path, "title": n.title, "tags": n.tags,
            "type": n.frontmatter.get("type") if isinstance(n.frontmatter.get("type"), str) else None}


NoteArg = Annotated[str, Field(min_length=1, max_length=1024, description=(
    "a note name ('Project Apollo'), a path ('projects/Apollo.md'), or an alias"))]
NameFilter = Annotated[str, Field(max_length=200, description="only entries whose name contains this")]


def vault_tools(vault: Vault, prefix: str) -> list[ToolDefinition]:
    common: dict[str, Any] = {"capability": READ, "annotations": READ_ONLY, "tags": ("vault",), **NO_OUTPUT}

    @tool(f"{prefix}_list", **common,
          tests=[{"name": "limit bounds the list", "arguments": {"limit": 1},
                  "check": lambda r: len(r["notes"]) <= 1 and r["truncated"] == (r["count"] > 1)},
                 {"name": "folder outside refused", "arguments": {"folder": "../"}, "error": PATH_OUTSIDE}])
    def list_notes(folder: Annotated[str, Field(max_length=1024)] | None = None,
                   tag: Annotated[str, Field(max_length=200)] | None = None,
                   limit: Limit50of500 = 50) -> dict[str, Any]:
        """List notes in the vault, most recently modified first; filter by folder or tag.

        Args:
            folder: a folder inside the vault
            tag: a tag, with or without '#'; includes sub-tags
        """
        notes = vault.notes()
        if folder:
            real = vault.root.resolve(folder)
            base = vault.root.relative(real)
            notes = [n for n in notes if base == "." or n.path.startswith(base.rstrip("/") + "/")]
        if tag:
            t = tag.lstrip("#").lower()
            notes = [n for n in notes if any(x.lower() == t or x.lower().startswith(t + "/") for x in n.tags)]
        notes.sort(key=lambda n: n.mtime, reverse=True)
        return {"count": len(notes), "notes": [_summary(n) for n in notes[:limit]], "truncated": len(notes) > limit}

    @tool(f"{prefix}_read", **common,
          tests=[{"name": "traversal refused", "arguments": {"note": "../secret.md"}, "error": PATH_OUTSIDE},
                 {"name": "absolute refused", "arguments": {"note": "/etc/passwd.md"}, "error": PATH_OUTSIDE}])
    def read_note(note: NoteArg) -> dict[str, Any]:
        """Read one note: its frontmatter, tags, outgoing wikilinks (resolved) and content."""
        notes = vault.notes()
        found = vault.find(note, notes)
        idx = vault.index(notes)
        content, cut = clip(found.body, MAX_CONTENT_CHARS)
        links = []
        for target in dict.fromkeys(found.links):
            hit = vault.resolve_link(target, idx)
            links.append({"target": target, "path": hit.path if hit else None})
        frontmatter: dict[str, Any] = found.frontmatter
        if len(repr(frontmatter)) > MAX_FRONTMATTER_CHARS:  # bounded like the content
            frontmatter = {"truncated": f"over {MAX_FRONTMATTER_CHARS} characters; read the note's file instead"}
        return {"path": found.path, "title": found.title, "frontmatter": frontmatter, "tags": found.tags,
                "links": links, "content": content, "truncated": cut or found.truncated, "problem": found.problem}

    @tool(f"{prefix}_search", **common,
          tests=[{"name": "empty query invalid", "arguments": {"query": ""}, "error": "invalid_params"},
                 {"name": "limit bounds results", "arguments": {"query": "e", "limit": 2},
                  "check": lambda r: len(r["results"]) <= 2}])
    def search(query: Annotated[str, Field(min_length=1, max_length=500)], limit: Limit20of200 = 20) -> dict[str, Any]:
        """Find notes whose title or lines contain the text (case-insensitive); best matches first, with the
        matching lines."""
        q = query.lower()
        hits = []
        for n in vault.notes():
            lines = [(i + 1, line.strip()) for i, line in enumerate(n.lines) if q in line.lower()]
            in_title = q in n.title.lower()
            if not lines and not in_title:
                continue
            score = len(lines) + (5 if in_title else 0)
            hits.append((score, n, lines))
        hits.sort(key=lambda h: (-h[0], h[1].path))
        return {"query": query, "count": len(hits), "truncated": len(hits) > limit,
                "results": [{**_summary(n), "matches": [{"line": i, "text": clip(t, 300)[0]} for i, t in lines[:5]]}
                            for _, n, lines in hits[:limit]]}

    @tool(f"{prefix}_backlinks", **common,
          tests=[{"name": "traversal refused", "arguments": {"note": "../x.md"}, "error": PATH_OUTSIDE}])
    def backlinks(note: NoteArg) -> dict[str, Any]:
        """The notes that link to a note with [[wikilinks]], with the linking lines."""
        notes = vault.notes()
        target = vault.find(note, notes)
        idx = vault.index(notes)
        out = []
        for n in notes:
            if n is target:
                continue
            if any(vault.resolve_link(t, idx) is target for t in n.links):
                lines = [{"line": i + 1, "text": clip(line.strip(), 300)[0]} for i, line in enumerate(n.lines)
                         if "[[" in line and any(vault.resolve_link(m.group(1), idx) is target
                                                 for m in _WIKILINK_RE.finditer(line))]
                out.append({**_summary(n), "mentions": lines[:5]})
        out.sort(key=lambda r: r["path"])
        return {"note": target.path, "count": len(out), "backlinks": out}

    @tool(f"{prefix}_tags", **common,
          tests=[{"name": "most used first", "arguments": {},
                  "check": lambda r: [t["notes"] for t in r["tags"]] == sorted(
                      (t["notes"] for t in r["tags"]), reverse=True)}])
    def tags(limit: Limit100of1000 = 100) -> dict[str, Any]:
        """Every tag in the vault (frontmatter and inline #tags) with how many notes carry it."""
        counts = Counter(t for n in vault.notes() for t in n.tags)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].lower()))
        return {"count": len(ranked), "tags": [{"tag": t, "notes": c} for t, c in ranked[:limit]]}

    def _entities(kind: str, fm_keys: tuple[str, ...], name: str | None, limit: int) -> dict[str, Any]:
        """Notes of ``type: kind`` plus names listed in other notes' ``fm_keys``, each with who mentions it."""
        notes = vault.notes()
        idx = vault.index(notes)
        found: dict[str, dict[str, Any]] = {}

        def entry(label: str) -> dict[str, Any]:
            hit = vault.resolve_link(label, idx)
            key = hit.path if hit else label.lower()
            e = found.setdefault(key, {"name": hit.title if hit else label, "note": hit.path if hit else None,
                                       "mentioned_in": []})
            if hit is not None:
                e.update({"frontmatter": {k: v for k, v in hit.frontmatter.items() if k != "tags"}})
            return e

        for n in notes:
            if str(n.frontmatter.get("type", "")).lower() == kind:
                entry(n.key)
            for key in fm_keys:
                for value in _as_list(n.frontmatter.get(key)):
                    e = entry(_strip_link(value))
                    if n.path not in e["mentioned_in"] and n.path != e["note"]:
                        e["mentioned_in"].append(n.path)
        rows = sorted(found.values(), key=lambda e: e["name"].lower())
        if name:
            rows = [e for e in rows if name.lower() in e["name"].lower()]
        return {"count": len(rows), "truncated": len(rows) > limit, kind + "s" if kind != "person" else "people":
                rows[:limit]}

    @tool(f"{prefix}_people", **common,
          tests=[{"name": "bounded", "arguments": {"limit": 1}, "check": lambda r: len(r["people"]) <= 1}])
    def people(name: NameFilter | None = None, limit: Limit50of500 = 50) -> dict[str, Any]:
        """People in the vault: notes with 'type: person' and names listed in notes' 'people' frontmatter, each
        with the notes that mention them."""
        return _entities("person", ("people", "attendees", "author"), name, limit)

    @tool(f"{prefix}_projects", **common,
          tests=[{"name": "name filter", "arguments": {"name": "\u2400no such project\u2400"},
                  "match": {"count": 0, "projects": []}}])
    def projects(name: NameFilter | None = None, limit: Limit50of500 = 50) -> dict[str, Any]:
        """Projects in the vault: notes with 'type: project' and names in notes' 'project'/'projects'
        frontmatter, each with the notes that mention them."""
        return _entities("project", ("projects", "project"), name, limit)

    return [list_notes, read_note, search, backlinks, tags, people, projects]


class VaultProvider(ContextProvider):
    """A markdown vault. ``prefix`` names the tools (``<prefix>_read``...); two vaults need two prefixes."""

    def __init__(self, root: str | os.PathLike[str], *, id: str = "vault", prefix: str | None = None,
                 name: str | None = None) -> None:
        super().__init__(id=id, name=name or f"Vault {os.path.basename(os.path.abspath(root))}",
                         domains=("vault", "knowledge", "people", "projects"),
                         description="An Obsidian-style markdown vault: notes, wikilinks, tags, people, projects")
        self.root = Root(root, what="vault")
        self.prefix = prefix or id

    async def connect(self) -> Connected:
        self.root.check()
        vault = Vault(self.root)
        return Connected(self, vault_tools(vault, self.prefix), lambda: _context(vault, self.prefix),
                         lambda: _health(vault, self.id))


def _context(vault: Vault, prefix: str) -> str:
    notes = vault.notes()
    recent = sorted(notes, key=lambda n: n.mtime, reverse=True)[:5]
    top = Counter(t for n in notes for t in n.tags).most_common(8)
    lines = [f"Vault {os.path.basename(vault.root.real)!r}: {len(notes)} notes "
             f"(tools {prefix}_search, {prefix}_read, {prefix}_backlinks)."]
    if recent:
        lines.append("Recently changed: " + ", ".join(n.title for n in recent) + ".")
    if top:
        lines.append("Top tags: " + ", ".join(f"#{t} ({c})" for t, c in top) + ".")
    return "\n".join(lines)


def _health(vault: Vault, pid: str) -> ProviderHealth:
    try:
        vault.root.check()
    except Exception as exc:
        return ProviderHealth(pid, "down", getattr(exc, "message", str(exc)))
    notes = vault.notes()
    problems = [n.problem for n in notes if n.problem]
    status: Status = "degraded" if problems else "up"
    return ProviderHealth(pid, status, f"{len(problems)} note(s) with unreadable frontmatter" if problems else None,
                          tools=7, details={"notes": len(notes), "problems": problems[:10]})


def vault_provider(root: str | os.PathLike[str], **options: Any) -> VaultProvider:
    """The ``vault`` entry point: ``vault:/path/to/vault``."""
    return VaultProvider(root, **options)


__all__ = ["Note", "Vault", "VaultProvider", "parse_note", "vault_provider", "vault_tools"]
