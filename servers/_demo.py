"""``openfunctions-mcp demo``: a real server subprocess, driven by the MCP SDK client.

Prints what a newcomer should see: the tools the server lists, one call,
its structured result and the receipt that came with it in ``_meta``.

With the ``work`` or ``all`` profile (``all`` is the default) and no
``--catalog``, it also writes a tiny demo project and catalog into the data
dir, issues a grant to the demo principal (``openfunctions-mcp grant
issue``), and walks an attempt through preview -> start -> run -> verify ->
complete with the ``of_work_*`` tools. (If ``openfunctions.work`` provides
``demo_session(client, say)``, that walkthrough is used instead.)
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio

from ._server import RECEIPT_META_KEY

DEMO_PRINCIPAL = "demo-agent"


def _say(text: str = "") -> None:
    print(text, flush=True)


def _server_params(profile: str, data_dir: Path, catalog: str | None) -> Any:
    from mcp.client.stdio import StdioServerParameters

    # --log-level error: the server's warnings are JSON lines on stderr, which would land in the middle of the
    # walkthrough; the one a newcomer would meet (the 'all' profile's gateway part is off) is said in words instead.
    args = ["-m", "openfunctions.servers", "serve", "--profile", profile, "--data-dir", str(data_dir),
            "--principal", DEMO_PRINCIPAL, "--log-level", "error"]
    if catalog:
        args += ["--catalog", str(catalog)]
    return StdioServerParameters(command=sys.executable, args=args)


def _demo_project(root: Path) -> Path:
    """A tiny project and work catalog: write a file under src/, a verifier that checks it."""
    (root / "src").mkdir(parents=True, exist_ok=True)
    check = (
        "import pathlib, sys; "
        "sys.exit(0 if pathlib.Path('src/hello.txt').read_text().startswith('hello') else 1)"
    )
    catalog = root / "catalog.toml"
    catalog.write_text(
        "version = 1\n"
        'workspace = "."\n\n'
        "[steps.write_src]\n"
        'kind = "write_file"\n'
        'description = "Write one file under src/."\n'
        'paths = ["src/**"]\n\n'
        "[steps.check]\n"
        'kind = "command"\n'
        'description = "Check that src/hello.txt greets (the verifier)."\n'
        f"argv = {json.dumps([sys.executable, '-c', check])}\n"
        'effect = "read"\n'
        "verifier = true\n"
        "timeout_s = 60\n"
    )
    return catalog


def _issue_grant(data_dir: Path, catalog: Path) -> None:
    import subprocess

    subprocess.run(
        [sys.executable, "-m", "openfunctions.servers", "grant", "issue", "--principal", DEMO_PRINCIPAL,
         "--steps", "write_src,check", "--paths", "src/**", "--ttl", "1h", "--catalog", str(catalog),
         "--data-dir", str(data_dir)],
        check=True, capture_output=True, timeout=120,
    )
    _say(f"$ openfunctions-mcp grant issue --principal {DEMO_PRINCIPAL} --steps write_src,check --paths 'src/**' --ttl 1h")


async def _work_walkthrough(client: Any) -> None:
    """preview -> start -> run -> verify -> complete, through the of_work_* tools."""
    try:
        from openfunctions.work import demo_session  # type: ignore[attr-defined]
    except ImportError:
        demo_session = None
    if demo_session is not None:  # the work package may bring its own walkthrough
        _say("\nwork walkthrough: preview -> start -> run -> verify -> complete")
        await demo_session(client, _say)
        return

    async def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await client.call_tool(name, args)
        payload = result.structured_content or {}
        receipt = (result.meta or {}).get(RECEIPT_META_KEY, {})
        keys = ("previewId", "allGranted") if name == "of_work_preview" else ("attemptId", "state", "passed", "proofDigest")
        shown = {k: payload[k] for k in keys if k in payload}
        if result.is_error:
            shown = {"isError": True, "message": result.content[0].text if result.content else ""}
        args_text = json.dumps(args)
        args_text = args_text if len(args_text) <= 40 else args_text[:37] + "..."
        _say(f"  {name:<17} {args_text:<41} -> {json.dumps(shown)}  [receipt: {receipt.get('outcome')}]")
        if result.is_error:
            raise RuntimeError(f"{name} failed: {shown['message']}")
        return payload

    _say("\nwork walkthrough (each line: tool, arguments -> reply, [receipt outcome]):")
    try:
        plan = [{"step": "write_src", "params": {"path": "src/hello.txt", "content": "hello from the demo\n"}}, {"step": "check"}]
        preview = await call("of_work_preview", {"plan": plan})
        await call("of_work_start", {"previewId": preview["previewId"]})
        await call("of_work_run_step", {})
        await call("of_work_verify", {})
        await call("of_work_complete", {})
    except RuntimeError as exc:
        _say(f"  (walkthrough stopped: {exc})")


async def _session(profile: str, data_dir: Path, catalog: str | None = None) -> int:
    from mcp import Client
    from mcp_types import TextContent

    if profile in ("work", "all") and catalog is None:
        catalog = str(_demo_project(data_dir / "demo-project"))
        _say(f"demo project and work catalog: {catalog}")
        _issue_grant(data_dir, Path(catalog))
    shown_catalog = f" --catalog {catalog}" if catalog else ""
    _say(f"$ openfunctions-mcp serve --profile {profile} --data-dir {data_dir}{shown_catalog} --log-level error   "
         "(a subprocess, stdio)")
    async with Client(_server_params(profile, data_dir, catalog), read_timeout_seconds=60) as client:
        info = client.server_info
        _say(f"connected: {info.name if info else '?'} {info.version if info else ''}, protocol {client.protocol_version}")
        tools = (await client.list_tools()).tools
        _say(f"\ntools/list -> {len(tools)} tools")
        if profile == "all":
            _say("  (the 'all' profile's gateway part is off here: it mounts the MCP servers that an --upstreams "
                 "FILE names; see docs/GATEWAY.md)")
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
            first = bad.content[0] if bad.content else None
            _say(f"  isError: {bad.is_error}  message: {first.text if isinstance(first, TextContent) else ''}")
            bad_receipt = (bad.meta or {}).get(RECEIPT_META_KEY, {})
            _say(f"  receipt: outcome={bad_receipt.get('outcome')} handler_started={bad_receipt.get('handler_started')}")
        if any(n.startswith("of_work_") for n in names):
            await _work_walkthrough(client)
        if "memory_save_fact" in names or "rag_search" in names:
            from openfunctions.rag import demo_session as state_demo  # memory save + RAG search

            await state_demo(client, _say)
    if profile in ("agents", "all"):  # the agents layer's own part: an agent answering with the host's model
        from openfunctions.agents.demo import demo_session as agents_demo

        await agents_demo(data_dir, _say)
    journal_dir = data_dir / "journal"
    if journal_dir.is_dir():
        journals = sorted(p.name for p in journal_dir.glob("*.journal"))
        _say(f"\nexecution journal (every call above, fsynced before its reply): {', '.join(journals)} in {journal_dir}")
    _say("\nAdd it to an MCP host: see claude_desktop_config.example.json "
         "(command: uvx --from /path/to/openfunctions-mcp openfunctions-mcp)")
    return 0


def run_demo(*, profile: str = "tools", data_dir: Path | None = None, catalog: str | None = None,
             keep: bool = False) -> int:
    """Run the demo. A ``data_dir`` given is used and kept; else a fresh temporary one, deleted unless ``keep``."""
    if data_dir is not None:
        rc = anyio.run(_session, profile, Path(data_dir), catalog)
        _say(f"\ndata directory kept (you chose it): {data_dir}")
        _say_how_to_look(Path(data_dir))
        return rc
    if keep:
        kept = Path(tempfile.mkdtemp(prefix="openfunctions-demo-"))
        rc = anyio.run(_session, profile, kept, catalog)
        _say(f"\ndata directory kept (--keep): {kept}")
        _say_how_to_look(kept)
        return rc
    with tempfile.TemporaryDirectory(prefix="openfunctions-demo-") as tmp:
        rc = anyio.run(_session, profile, Path(tmp), catalog)
    _say(f"\ndeleted the demo's temporary data directory {tmp} (run `openfunctions-mcp demo --keep` to keep it)")
    return rc


def _say_how_to_look(data_dir: Path) -> None:
    journals = sorted((data_dir / "journal").glob("*.journal"))
    if journals:
        _say(f"  look at it:  openfunctions-mcp journal inspect {journals[0]}")
        _say(f"               openfunctions-mcp journal tail {journals[0]}")


__all__ = ["run_demo"]
