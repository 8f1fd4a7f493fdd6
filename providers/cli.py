"""``openfunctions-mcp gateway check FILE``: connect to each upstream of an ``mcpServers`` file, report.

Each upstream is started (stdio) or reached (HTTP) exactly as the gateway
would, its tools listed and mounted into a scratch registry, then closed.
Nothing is called. Output: one line per upstream (status, tool count, where
it is, what is wrong, its call scope and each tool's that differs), or
``--json``; ``--tools`` lists every mounted tool with its scope.

Exit codes: 0 every upstream is up; 1 at least one is down; 2 the file is
unreadable or malformed (the message names the server and key).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

EXIT_OK, EXIT_DOWN, EXIT_CONFIG = 0, 1, 2


def add_commands(subparsers: Any) -> None:
    """Add the ``gateway`` command group to an argparse subparsers object."""
    g = subparsers.add_parser("gateway", help="check the upstream MCP servers a gateway mounts",
                              description="Tools for the MCP gateway (serve --profile gateway --upstreams FILE).")
    gsub = g.add_subparsers(dest="gateway_command", metavar="{check}")
    g.set_defaults(func=lambda args: (g.print_help(sys.stderr), 2)[1])
    p = gsub.add_parser("check", help="connect to each upstream; print its health and tool count",
                        description="Connect to each upstream of an mcpServers JSON file (as the gateway would), "
                                    "list its tools, report, disconnect. Exit 0 if all are up, 1 if any is down, "
                                    "2 if the file is malformed.")
    p.add_argument("file", metavar="FILE", help="a JSON file with an 'mcpServers' object (e.g. servers.json)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="override each upstream's connectTimeout (default: its own, else 30)")
    p.add_argument("--tools", action="store_true", help="also list each upstream's mounted tools with their call scope")
    p.set_defaults(func=cmd_check)


async def _check(args: argparse.Namespace) -> list[dict[str, Any]]:
    import dataclasses

    from openfunctions.core import ToolRegistry

    from ._config import load_upstreams
    from ._gateway import Gateway
    from ._mcp import UPSTREAM_META_KEY

    configs = load_upstreams(args.file)
    if args.timeout is not None:
        configs = [dataclasses.replace(c, connect_timeout=args.timeout) for c in configs]
    registry = ToolRegistry()
    gateway = Gateway(configs, registry, errlog=sys.stderr)
    try:
        await gateway.start()
        out = []
        for h in await gateway.health():
            row = h.to_dict()
            tag = f"context:{h.provider_id}"
            mounted = sorted((t for t in registry.list() if tag in t.tags), key=lambda t: t.name)
            row["tool_scopes"] = {t.name: t.meta[UPSTREAM_META_KEY]["scope"] for t in mounted}
            if args.tools:
                row["tool_names"] = [t.name for t in mounted]
            out.append(row)
        return out
    finally:
        await gateway.aclose()


def cmd_check(args: argparse.Namespace) -> int:
    import anyio

    from openfunctions.core import configure_logging

    from ._errors import UpstreamConfigError

    configure_logging("error")
    try:
        rows = anyio.run(_check, args)
    except UpstreamConfigError as exc:
        print(f"openfunctions-mcp gateway check: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    if args.json:
        print(json.dumps({"upstreams": rows}, indent=2))
    else:
        if not rows:
            print("no enabled upstreams in the file")
        for r in rows:
            d = r["details"]
            status = "up  " if r["ok"] else "DOWN"
            line = f"{status}  {r['provider']:<20} {r['tools'] or 0:>4} tools  {d['transport']:<5} {d['target']}"
            print(line)
            if not r["ok"]:
                print(f"      error: {r['message']}")
            print(f"      scope: {d['scope']}")
            scopes = r["tool_scopes"]
            for name, scope in scopes.items():
                if scope != d["scope"] and not args.tools:
                    print(f"      tool {name}: scope {scope}")
            for tool, problem in (d.get("tool_problems") or {}).items():
                print(f"      tool {tool!r}: {problem}")
            for name in r.get("tool_names", []):
                print(f"      - {name}  [{scopes[name]}]")
    return EXIT_OK if all(r["ok"] for r in rows) else EXIT_DOWN


__all__ = ["add_commands", "cmd_check"]
