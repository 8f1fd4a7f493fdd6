"""``openfunctions-mcp plugins list``: what installed packages add, where it came from, whether it loads.

One line per entry point of the four groups (``openfunctions.tools``,
``.providers``, ``.skills``, ``.prompts``): group, name, target
(``module:attr``), distribution and version, and ``ok`` or the error that
makes it broken. ``--json`` prints a list of objects with the same fields.

Exit codes: 0 listed (broken plugins are reported, not fatal); 1 with
``--check`` when a plugin is broken.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_commands(subparsers: Any) -> None:
    """Add the ``plugins`` command group to an argparse subparsers object."""
    g = subparsers.add_parser("plugins", help="list the installed plugins (tools, providers, skills, prompts)",
                              description="Plugins are entry points of installed packages (docs/EXTENDING.md).")
    gsub = g.add_subparsers(dest="plugins_command", metavar="{list}")
    g.set_defaults(func=lambda args: (g.print_help(sys.stderr), 2)[1])
    p = gsub.add_parser("list", help="each plugin: group, name, target, distribution, version, status",
                        description="Load each plugin once and list it with where it came from; a broken one is "
                                    "shown with its error.")
    p.add_argument("--group", choices=("tools", "providers", "skills", "prompts"), action="append",
                   help="only this group (repeatable)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--check", action="store_true", help="exit 1 if a plugin is broken")
    p.set_defaults(func=cmd_list)


def cmd_list(args: argparse.Namespace) -> int:
    from . import GROUPS, list_plugins

    rows = list_plugins([GROUPS[g] for g in args.group] if args.group else None)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2))
    else:
        if not rows:
            print("no plugins installed")
        for r in rows:
            dist = f"{r.distribution} {r.version}" if r.distribution else "(unknown distribution)"
            status = "ok" if r.error is None else f"BROKEN: {r.error}"
            print(f"{r.group:<24} {r.name:<16} {r.value:<56} {dist:<28} {status}")
    return 1 if args.check and any(r.error for r in rows) else 0


__all__ = ["add_commands"]
