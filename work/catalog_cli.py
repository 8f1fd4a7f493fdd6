"""``openfunctions-mcp catalog check FILE``: validate a work catalog and print its steps.

Exit 0 when the catalog is valid (its steps and digest are printed; ``--json``
prints the same as ``of_work_catalog`` describes it), 2 when it is not (the
error names the file, the step and the field).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HELP = "validate a work catalog and print its steps"


def add_commands(subparsers: Any) -> argparse.ArgumentParser:
    cat: argparse.ArgumentParser = subparsers.add_parser("catalog", help=HELP, description=__doc__.split("\n\n")[0])
    sub = cat.add_subparsers(dest="catalog_command", metavar="{check}")
    sub.required = True
    check = sub.add_parser("check", help="validate a catalog file and print its steps")
    check.add_argument("file", metavar="FILE")
    check.add_argument("--json", action="store_true", help="print the catalog's description as JSON")
    check.set_defaults(func=_cmd_check)
    return cat


def _cmd_check(args: argparse.Namespace) -> int:
    from openfunctions.core.errors import OpenFunctionsError

    from ._catalog import Catalog

    try:
        catalog = Catalog.load(args.file)
    except OpenFunctionsError as exc:
        print(f"openfunctions-mcp catalog: invalid: {exc.message}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"openfunctions-mcp catalog: cannot read {args.file!r}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(catalog.describe(), indent=2, sort_keys=True))
        return 0
    print(f"{args.file}: valid; digest {catalog.digest}; workspace {catalog.workspace}")
    for name, s in sorted(catalog.steps.items()):
        flags = [s.kind, f"effect={s.effect}"]
        if s.idempotent:
            flags.append("idempotent")
        if s.verifier:
            flags.append("verifier")
        if s.reconcilable:
            flags.append("reconcilable")
        what = " ".join(s.argv) if s.kind == "command" else f"tool {s.tool}" if s.kind == "tool" else ", ".join(s.paths)
        params = ", ".join(p.name + ("" if p.required else "?") for p in s.params)
        print(f"  {name:<20} {' '.join(flags)}\n  {'':<20} {what}" + (f"\n  {'':<20} params: {params}" if params else ""))
    return 0


__all__ = ["add_commands", "HELP"]
