"""``openfunctions-mcp test``: run the tests tools carry (``define_tool(tests=[...])``) through the executor.

Tools come from ``--module PKG.MOD[:ATTR]`` (as ``serve --module``),
``--provider NAME:ARG`` (a context provider, connected for the run) and
``--example-tools`` (the shipped example tools). Each case runs through a
registry's executor, so it is validated, policy-checked, scheduled and gets a
receipt; the table shows each case's verdict, the receipt's outcome and id,
and why a case failed. ``--json`` prints the rows.

Exit codes: 0 every case passed; 1 a case failed, or no tool had tests;
2 the tools could not be loaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


def add_commands(subparsers: Any) -> None:
    """Add the ``test`` command to an argparse subparsers object."""
    p = subparsers.add_parser("test", help="run the tests your tools carry, through the executor",
                              description="Run each tool's test cases (define_tool(tests=[...])) through the "
                                          "executor, print a table, exit 1 on a failure.")
    p.add_argument("--module", action="append", default=[], metavar="PKG.MOD:ATTR", help="tools to test (repeatable)")
    p.add_argument("--provider", action="append", default=[], metavar="NAME:ARG",
                   help="a context provider whose tools to test (repeatable), e.g. vault:DIR")
    p.add_argument("--example-tools", action="store_true", help="also test the shipped example tools")
    p.add_argument("--files-root", metavar="DIR", help="with --example-tools: the root of of_list_dir")
    p.add_argument("--tool", action="append", metavar="NAME", help="only this tool (repeatable)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_test)


async def _run(args: argparse.Namespace) -> tuple[list[Any], int]:
    from openfunctions.core import ToolRegistry, run_tool_tests
    from openfunctions.plugins import resolve_provider
    from openfunctions.providers import connect_provider

    from ._example_tools import example_tools
    from ._profiles import load_module_tools

    registry = ToolRegistry()
    for spec in args.module:
        part = load_module_tools(spec)
        for t in part.list() if isinstance(part, ToolRegistry) else part:
            registry.register(t, source=f"--module {spec}")
    if args.example_tools:
        for t in example_tools(files_root=args.files_root):
            registry.register(t, source="the example tools")
    connected = []
    try:
        for spec in args.provider:
            connected.append(await connect_provider(resolve_provider(spec), registry))
        tools = [t for t in registry.list() if args.tool is None or t.name in args.tool]
        untested = [t.name for t in tools if not t.tests]
        return await run_tool_tests(registry, names=[t.name for t in tools]), len(untested)
    finally:
        for c in connected:
            await c.close()


def cmd_test(args: argparse.Namespace) -> int:
    import anyio

    from openfunctions.core import OpenFunctionsError, configure_logging, search_current_dir

    configure_logging("warning")
    search_current_dir()
    if not (args.module or args.provider or args.example_tools):
        print("openfunctions-mcp test: name the tools: --module PKG.MOD[:ATTR], --provider NAME:ARG or "
              "--example-tools", file=sys.stderr)
        return EXIT_CONFIG
    try:
        rows, untested = anyio.run(_run, args)
    except OpenFunctionsError as exc:
        print(f"openfunctions-mcp test: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    failed = [r for r in rows if not r.passed]
    if args.json:
        print(json.dumps({"results": [r.to_dict() for r in rows], "passed": len(rows) - len(failed),
                          "failed": len(failed), "untested_tools": untested}, indent=2))
    else:
        width = max([len(f"{r.tool} {r.case}") for r in rows] + [10])
        for r in rows:
            label = f"{r.tool} {r.case}"
            print(f"{'PASS' if r.passed else 'FAIL'}  {label:<{width}}  {r.outcome:<9}  {r.receipt_id}  "
                  f"{'' if r.passed and r.message == 'ok' else r.message}".rstrip())
        print(f"{len(rows) - len(failed)} passed, {len(failed)} failed"
              + (f"; {untested} tool(s) without tests" if untested else ""))
    if not rows:
        print("openfunctions-mcp test: no tool has tests (define_tool(..., tests=[...]))", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if failed else EXIT_OK


__all__ = ["add_commands"]
