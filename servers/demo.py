"""``openfunctions-mcp demo``: a real server subprocess, driven by the MCP SDK client.

Prints what a newcomer should see: the tools the server lists, one call,
its structured result and the receipt that came with it in ``_meta``.

Work walkthrough hook: when the served profile has the ``of_work_*`` tools
and ``openfunctions.work`` provides ``demo_session(client, say)`` (an async
function driving preview -> start -> run -> verify -> complete through the
given client), the demo runs it after the basic call.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from .server import RECEIPT_META_KEY


def _say(text: str = "") -> None:
    print(text, flush=True)


def _server_params(profile: str, data_dir: Path, catalog: str | None) -> Any:
    from mcp.client.stdio import StdioServerParameters

    args = ["-m", "openfunctions.servers", "serve", "--profile", profile, "--data-dir", str(data_dir)]
    if catalog:
        args += ["--catalog", str(catalog)]
    return StdioServerParameters(command=sys.executable, args=args)


async def _session(profile: str, data_dir: Path, catalog: str | None = None) -> int:
    from mcp import Client

    _say(f"$ openfunctions-mcp serve --profile {profile} --data-dir {data_dir}   (started as a subprocess, stdio)")
    async with Client(_server_params(profile, data_dir, catalog), read_timeout_seconds=60) as client:
        info = client.server_info
        _say(f"connected: {info.name if info else '?'} {info.version if info else ''}, protocol {client.protocol_version}")
        tools = (await client.list_tools()).tools
        _say(f"\ntools/list -> {len(tools)} tools")
        for t in tools:
            hints = t.annotations.model_dump(by_alias=True, exclude_none=True) if t.annotations else {}
            _say(f"  {t.name:<20} {(t.description or '').splitlines()[0][:70]}")
            if hints:
                _say(f"  {'':<20} annotations {json.dumps(hints)}")
        names = {t.name for t in tools}
        if "of_hash_text" in names:
            args = {"text": "hello, MCP"}
            _say(f"\ntools/call of_hash_text {json.dumps(args)}")
            result = await client.call_tool("of_hash_text", args)
            _say(f"  isError:           {result.is_error}")
            _say(f"  structuredContent: {json.dumps(result.structured_content)}")
            receipt = (result.meta or {}).get(RECEIPT_META_KEY, {})
            _say(f"  _meta[{RECEIPT_META_KEY!r}]:")
            for key in ("receipt_id", "tool", "outcome", "certainty", "params_sha256", "result_sha256", "duration_ms"):
                _say(f"    {key:<14} {receipt.get(key)}")
            _say("\n  A failing call is isError with a message, and still has a receipt:")
            bad = await client.call_tool("of_hash_text", {"text": 42})
            _say(f"  isError: {bad.is_error}  message: {bad.content[0].text if bad.content else ''}")
            bad_receipt = (bad.meta or {}).get(RECEIPT_META_KEY, {})
            _say(f"  receipt: outcome={bad_receipt.get('outcome')} handler_started={bad_receipt.get('handler_started')}")
        if any(n.startswith("of_work_") for n in names):
            try:
                from openfunctions.work import demo_session  # type: ignore[attr-defined]
            except ImportError:
                _say("\n(work walkthrough: openfunctions.work.demo_session is not in this build yet)")
            else:
                _say("\nwork walkthrough: preview -> start -> run -> verify -> complete")
                await demo_session(client, _say)
    journal_dir = data_dir / "journal"
    if journal_dir.is_dir():
        _say(f"\nexecution journal: {', '.join(sorted(p.name for p in journal_dir.iterdir()))} in {journal_dir}")
    _say("\nAdd it to an MCP host: see claude_desktop_config.example.json (command: uvx openfunctions-mcp)")
    return 0


def run_demo(*, profile: str = "tools", data_dir: Path | None = None, catalog: str | None = None) -> int:
    if data_dir is not None:
        return anyio.run(_session, profile, Path(data_dir), catalog)
    with tempfile.TemporaryDirectory(prefix="openfunctions-demo-") as tmp:
        return anyio.run(_session, profile, Path(tmp), catalog)


__all__ = ["run_demo"]
