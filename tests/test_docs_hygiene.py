"""The repository explains the product, not the history of its making.

Docs, README, CHANGELOG, pyproject.toml and every ``.py`` file (product code,
tests, bench) are read for work-log talk: issue numbers, numbered work
sessions, links into a notes folder, who did a piece of work ("helper X",
"the coordinator"), and the vocabulary of the original brief ("the seed",
"product card"). Each such phrase should say what the product does and why
instead; history belongs in git and in CHANGELOG.md entries that describe
changes. Decisions worth keeping are design records (docs/design/).

The patterns are precise rather than broad, so that ordinary words pass: a
thread pool's "helper thread", a CLI flag such as ``--issues 1500``, "the
random seed" of a fuzzer and an MCP client's session are not work-log talk.
``ALLOWED`` lists the known hits still to be rewritten, each with its file
and the exact text; an entry that no longer matches fails too, so the list
only shrinks.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve()

# Names the parallel workers on this code base went by; "helper <name>" is a by-line.
_WORKERS = (
    "adapters|agents|chat|chatfix|claims|core|door|ext|fastpath|flows|gateway|guard|hardening|house|journal|"
    "lanes|loop|map|newcomer|perf|pg|pgflows|pgshared|pgwork|rag|replicas|review|served|state|tasks|tidy|ui|"
    "work|workflows"
)

PATTERNS: dict[str, re.Pattern[str]] = {
    # "issue 17", "issues 16/19", "Issue #5"; not a flag such as --issues 1500
    "issue number": re.compile(r"(?<![-\w])issues?\s+#?\d", re.I),
    # "session 6", "Session 9:", "session-7/" (a notes folder); an MCP session never carries a bare number
    "work session": re.compile(r"\bsession[ -]\d+\b", re.I),
    "this session": re.compile(r"\b(?:this|last|next|previous|earlier) (?:work )?session\b(?! ?(?:id|ID|'s id))"),
    "notes folder": re.compile(r"docs/notes\b"),
    "the seed": re.compile(r"\bthe seed(?:'s)?\b|\bseed's\b", re.I),
    "product card": re.compile(r"\bproduct card\b", re.I),
    "by-line": re.compile(rf"\bhelpers?\s+[\"'`]?(?:{_WORKERS})\b[\"'`]?|\bhelpers'|\b(?:by|from|for) (?:a |the )?helper\b"
                          r"(?! (?:thread|function|process|task|method|module|class))", re.I),
    "coordinator": re.compile(r"\bcoordinator\b", re.I),
}

# (path, exact text matched): why it is still there. Remove an entry when its text is rewritten.
ALLOWED: dict[tuple[str, str], str] = {}

_SKIP_DIRS = {"node_modules", "build", "dist", "__pycache__"}


def _files() -> list[Path]:
    out = [REPO / name for name in ("README.md", "CHANGELOG.md", "pyproject.toml") if (REPO / name).is_file()]
    out += sorted((REPO / "docs").rglob("*.md"))
    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS
                         and not d.endswith(".egg-info"))
        out += [Path(root) / f for f in sorted(files) if f.endswith(".py")]
    return [p for p in out if p.resolve() != THIS]


def _hits(text: str) -> list[tuple[str, int, str]]:
    """(pattern name, line number, matched text) for every work-log phrase in ``text``."""
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for name, pattern in PATTERNS.items():
            found += [(name, lineno, m.group(0)) for m in pattern.finditer(line)]
    return found


def _key(rel: str, matched: str) -> tuple[str, str] | None:
    """The ``ALLOWED`` entry that covers this hit (matched text compared case-insensitively, by prefix)."""
    low = matched.lower()
    return next((k for k in ALLOWED if k[0] == rel and low.startswith(k[1].lower())), None)


def test_no_work_log_talk_in_docs_or_code():
    bad, used = [], set()
    for path in _files():
        rel = path.relative_to(REPO).as_posix()
        for name, lineno, matched in _hits(path.read_text(encoding="utf-8", errors="replace")):
            key = _key(rel, matched)
            if key is None:
                bad.append(f"{rel}:{lineno}: {name}: {matched!r}")
            else:
                used.add(key)
    assert not bad, ("work-log talk (say what the product does and why; history goes in git and CHANGELOG "
                     "entries):\n" + "\n".join(bad))
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"rewritten, so remove from ALLOWED: {stale}"


def test_the_patterns_catch_work_log_talk_and_pass_ordinary_words():
    caught = [
        "Issue 16 targets", "(issues 16/19)", "see issue #5", "Session 9: the journal", "since session 5",
        "docs/notes/session-9/coordinator.md", "the seed's rule", "as the seed says", "the product card fixes",
        "Section written by helper pgshared", 'Helper "journal" measured it', "while the other helpers' tests ran",
        "Nothing was benchmarked this session.", "the coordinator's two quiet runs",
    ]
    for text in caught:
        assert _hits(text), f"not caught: {text!r}"
    passed = [
        "each chunk is written by a helper thread", "[--issues 1500] [--limit 64]", "whatever the random seed",
        "the free-port helper every server test uses", "the client's session is closed", "Mcp-Session-Id",
        "issue a grant to a principal", "a session advisory lock", "seeded JSON-RPC fuzzer", "for the port helper",
    ]
    for text in passed:
        assert not _hits(text), f"ordinary words caught: {text!r} -> {_hits(text)}"


def test_every_scanned_kind_of_file_is_found():
    """The walk reaches docs, the top-level files, product code, tests and bench, and skips the virtualenv."""
    rels = {p.relative_to(REPO).as_posix() for p in _files()}
    assert {"README.md", "CHANGELOG.md", "docs/ARCHITECTURE.md", "core/executor.py", "tests/test_import_graph.py",
            "bench/bench_server.py"} <= rels
    assert not any(r.startswith(".") or "/." in r for r in rels)
