"""Plugins from an installed distribution: listed with their origin, broken ones reported and skipped, served.

The "installed package" is a real distribution on ``sys.path`` of a
subprocess: a ``goodplug-1.2.3.dist-info`` folder (METADATA and
``entry_points.txt``, what ``pip install`` writes) next to its module, found
by ``importlib.metadata`` exactly as an installed wheel is. It declares good
and broken entry points in all four groups.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

ENTRY_POINTS = """\
[openfunctions.tools]
good = goodplug:tools
missing = goodplug.nowhere:tools
wrongkind = goodplug:NOT_TOOLS

[openfunctions.providers]
notes = goodplug:notes_provider
raises = goodplug:raises_on_import

[openfunctions.skills]
goodplug = goodplug:SKILLS_DIR

[openfunctions.prompts]
review = goodplug:review
"""

MODULE = '''
from pathlib import Path

from openfunctions.core import define_tool
from openfunctions.plugins import Prompt
from openfunctions.providers.reference import VaultProvider

def _echo(p, ctx):
    return {"echo": p["text"]}

tools = [define_tool(name="plug_echo", description="Echo text.", handler=_echo,
                     input_schema={"type": "object", "properties": {"text": {"type": "string"}},
                                   "required": ["text"], "additionalProperties": False})]
NOT_TOOLS = 42
SKILLS_DIR = Path(__file__).parent / "skills"
review = Prompt(name="review", description="Review a change", text="Review this change: {change}",
                arguments=({"name": "change", "description": "the diff", "required": True},))

def notes_provider(root=None):
    return VaultProvider(root or str(Path(__file__).parent / "notes"), id="notes")

def __getattr__(name):
    if name == "raises_on_import":
        raise RuntimeError("this plugin is broken on purpose")
    raise AttributeError(name)
'''


@pytest.fixture
def site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    pkg = site / "goodplug"
    (pkg / "skills").mkdir(parents=True)
    (pkg / "notes").mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent(MODULE))
    (pkg / "skills" / "summarise.md").write_text("---\ndescription: Summarise a thread\ntags: [writing]\n---\nKeep it short.\n")
    (pkg / "skills" / "bad.md").write_text("---\nname: bad\n")
    (pkg / "notes" / "Plugin note.md").write_text("From the plugin. #plugged\n")
    dist = site / "goodplug-1.2.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: goodplug\nVersion: 1.2.3\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    return site


def env_with(site: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def cli(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "openfunctions.servers", *args], env=env_with(site),
                          capture_output=True, text=True, timeout=120)


def test_plugins_list_names_origin_and_broken_ones(site):
    out = cli(site, "plugins", "list", "--json")
    assert out.returncode == 0, out.stderr
    rows = {(r["group"].split(".")[1], r["name"]): r for r in json.loads(out.stdout) if r["distribution"] == "goodplug"}
    assert set(rows) == {("tools", "good"), ("tools", "missing"), ("tools", "wrongkind"), ("providers", "notes"),
                         ("providers", "raises"), ("skills", "goodplug"), ("prompts", "review")}
    assert {k for k, r in rows.items() if r["ok"]} == {("tools", "good"), ("providers", "notes"),
                                                       ("skills", "goodplug"), ("prompts", "review")}
    assert rows[("tools", "wrongkind")]["error"].endswith("expected a ToolRegistry, a list of tools or a factory, got int")
    assert rows[("tools", "good")]["version"] == "1.2.3" and rows[("tools", "good")]["value"] == "goodplug:tools"
    assert "ModuleNotFoundError" in rows[("tools", "missing")]["error"]
    assert "broken on purpose" in rows[("providers", "raises")]["error"]
    # the reference providers ship as this distribution's own plugins
    assert {r["name"] for r in json.loads(out.stdout) if r["distribution"] == "openfunctions-mcp"} >= {
        "vault", "git", "calendar", "tasks"}
    text = cli(site, "plugins", "list", "--check")
    assert text.returncode == 1 and "BROKEN: entry point 'missing' (goodplug.nowhere:tools)" in text.stdout


def test_unknown_and_broken_provider_specs_fail_clearly(site, tmp_path):
    for spec, message in [("nosuch:/x", "no provider named 'nosuch'"),
                          ("raises", "broken on purpose"),
                          ("vault", "does it need an argument, as in vault:ARG?"),
                          (f"vault:{tmp_path / 'absent'}", "does not exist")]:
        out = cli(site, "serve", "--provider", spec, "--data-dir", str(tmp_path / "d"))
        assert out.returncode == 2 and message in out.stderr, (spec, out.stderr)
    other = cli(site, "serve", "--profile", "artifacts", "--skills", str(tmp_path), "--data-dir", str(tmp_path / "d"))
    assert other.returncode == 2 and "--provider and --skills apply to the tools and all profiles" in other.stderr


@pytest.mark.slow
@pytest.mark.anyio
async def test_serve_offers_plugins_providers_and_skills(site, tmp_path):
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "Apollo.md").write_text("---\ntags: [space]\n---\nSee [[Engine]].\n")
    (vault / "Engine.md").write_text("Thrust.\n")
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "triage.md").write_text("---\ndescription: Triage a bug report\n---\nAsk for the steps.\n")
    argv = [sys.executable, "-m", "openfunctions.servers", "serve", "--profile", "all", "--data-dir",
            str(tmp_path / "data"), "--provider", f"vault:{vault}", "--provider", "notes", "--skills", str(skills)]
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env_with(site))
    async with Client(params, read_timeout_seconds=60) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        backlinks = await client.call_tool("vault_backlinks", {"note": "Engine"})
        note = await client.call_tool("notes_read", {"note": "Plugin note"})
        loaded = await client.call_tool("skill_load", {"name": "summarise"})
        review = await client.get_prompt("review", {"change": "+1 line"})
        triage = await client.get_prompt("triage", {"request": "crash on start"})
        instructions = client.instructions
    assert {"vault_read", "vault_backlinks", "notes_read", "plug_echo", "skill_list", "skill_load"} <= tools
    assert prompts >= {"review", "triage", "summarise"} and "bad" not in prompts
    assert backlinks.structured_content["backlinks"][0]["path"] == "Apollo.md"
    assert note.structured_content["tags"] == ["plugged"]
    assert loaded.structured_content["instructions"] == "Keep it short.\n"
    assert review.messages[0].content.text == "Review this change: +1 line"
    assert triage.messages[0].content.text == "Ask for the steps.\n\nRequest: crash on start\n"
    assert "Vault 'vault': 2 notes" in instructions and "- triage: Triage a bug report" in instructions


def test_resolve_provider_forms(tmp_path, monkeypatch):
    from openfunctions.plugins import PluginError, resolve_provider
    from openfunctions.providers.reference import VaultProvider

    (tmp_path / "myprov.py").write_text(
        "from openfunctions.providers.reference import VaultProvider\n"
        f"provider = VaultProvider({str(tmp_path)!r}, id='mine')\n"
        f"def factory():\n    return VaultProvider({str(tmp_path)!r}, id='made')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert isinstance(resolve_provider(f"vault:{tmp_path}"), VaultProvider)
    assert resolve_provider("myprov:provider").id == "mine"  # a module in the current directory
    assert resolve_provider("myprov:factory").id == "made"
    for spec, code in [("vaultt:/notes", "provider_unknown"), ("vault", "provider_spec_invalid"),
                       ("myprov:provider:x", "provider_unknown"), ("", "provider_spec_invalid"),
                       ("myprov:nothing", "plugin_error")]:
        with pytest.raises(PluginError) as info:
            resolve_provider(spec)
        assert info.value.code == code, (spec, info.value.message)


@pytest.mark.anyio
async def test_a_plugin_prompt_named_like_a_skill_is_skipped(site, tmp_path, monkeypatch):
    from openfunctions.core import ToolRegistry
    from openfunctions.servers._extensions import open_extensions
    from openfunctions.servers._server import create_mcp_server

    monkeypatch.syspath_prepend(str(site))  # importlib.metadata finds goodplug-1.2.3.dist-info here
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "review.md").write_text("---\ndescription: The skill called review\n---\nRead the diff twice.\n")
    ext = await open_extensions([], [str(skills)])
    server = create_mcp_server(ToolRegistry(), name="t", version="0")
    for setup in ext.setups:
        setup(server)
    prompts = server._prompts  # what prompts/list serves
    assert prompts["review"].description == "The skill called review" and "summarise" in prompts
