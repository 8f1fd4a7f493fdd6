"""``openfunctions-mcp skills list|show``: the skills a server would offer, and the files it would skip.

``list`` prints one line per skill (name, tags, description, source), then
each problem (a file that does not parse, a duplicate name, a broken entry
point) on stderr; ``--json`` prints ``{"skills": [...], "problems": [...]}``.
``show NAME`` prints the skill's instructions. Skills come from each
``--skills DIR`` and from the installed ``openfunctions.skills`` entry points.

Exit codes: 0 done (problems are reported, not fatal); 1 ``show`` of an
unknown skill, or ``list --strict`` with problems.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_commands(subparsers: Any) -> None:
    """Add the ``skills`` command group to an argparse subparsers object."""
    s = subparsers.add_parser("skills", help="list and show the skills (markdown instructions) agents can load",
                              description="Skills: markdown files with frontmatter (name, description, tags) from "
                                          "--skills DIR and from installed packages (docs/EXTENDING.md).")
    ssub = s.add_subparsers(dest="skills_command", metavar="{list,show}")
    s.set_defaults(func=lambda args: (s.print_help(sys.stderr), 2)[1])
    for name, help_text in (("list", "list the skills, and the files skipped and why"),
                            ("show", "print one skill's instructions")):
        p = ssub.add_parser(name, help=help_text, description=help_text)
        if name == "show":
            p.add_argument("name", metavar="NAME")
        p.add_argument("--skills", action="append", default=[], metavar="DIR", help="a skills directory (repeatable)")
        p.add_argument("--no-plugins", action="store_true", help="leave out the installed packages' skills")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "list":
            p.add_argument("--strict", action="store_true", help="exit 1 if any skill file was skipped")
        p.set_defaults(func=cmd_list if name == "list" else cmd_show)


def _load(args: argparse.Namespace) -> Any:
    from . import load_skills

    return load_skills(args.skills, entry_points=not args.no_plugins)


def cmd_list(args: argparse.Namespace) -> int:
    skills = _load(args)
    if args.json:
        print(json.dumps({"skills": [s.summary() for s in skills],
                          "problems": [p.to_dict() for p in skills.problems]}, indent=2))
    else:
        if not len(skills):
            print("no skills (give --skills DIR, or install a package with openfunctions.skills entry points)")
        for s in skills:
            tags = f" [{', '.join(s.tags)}]" if s.tags else ""
            print(f"{s.name}{tags}: {s.description}\n    from {s.source}")
        for p in skills.problems:
            print(f"skipped: {p.message} ({p.code})", file=sys.stderr)
    return 1 if args.strict and skills.problems else 0


def cmd_show(args: argparse.Namespace) -> int:
    from . import SkillError

    skills = _load(args)
    try:
        s = skills.get(args.name)
    except SkillError as exc:
        print(f"openfunctions-mcp skills: {exc.message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**s.summary(), "meta": s.meta, "instructions": s.body}, indent=2))
    else:
        print(s.body, end="")
    return 0


__all__ = ["add_commands"]
