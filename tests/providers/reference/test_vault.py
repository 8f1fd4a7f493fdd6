"""The vault provider over a real directory: notes, wikilinks, backlinks, tags, people, projects, confinement."""

from __future__ import annotations

import pytest

from openfunctions.core import ToolError
from openfunctions.providers import check_provider_health, context_prompt
from openfunctions.providers.reference import VaultProvider

from .conftest import call, connected, write

pytestmark = pytest.mark.anyio


@pytest.fixture
async def vault(vault_dir):
    registry, conn = await connected(VaultProvider(vault_dir))
    return registry, conn


async def test_tools_are_tagged_reviewed_reads(vault):
    registry, _ = vault
    names = sorted(t.name for t in registry.list())
    assert names == ["vault_backlinks", "vault_list", "vault_people", "vault_projects", "vault_read",
                     "vault_search", "vault_tags"]
    for t in registry.list():
        assert t.schedule_class == "shared" and "context:vault" in t.tags


async def test_list_skips_hidden_and_symlinks_out(vault):
    registry, _ = vault
    out = await registry.execute("vault_list", {})
    paths = sorted(n["path"] for n in out["notes"])
    assert paths == ["Broken.md", "Daily/2025-03-01.md", "Engine.md", "People/Ada Lovelace.md", "Projects/Apollo.md"]
    tagged = await registry.execute("vault_list", {"tag": "#team"})
    assert [n["path"] for n in tagged["notes"]] == ["People/Ada Lovelace.md"]  # team/core counts as team
    folder = await registry.execute("vault_list", {"folder": "Projects"})
    assert [n["path"] for n in folder["notes"]] == ["Projects/Apollo.md"]


async def test_read_resolves_wikilinks_and_tags(vault):
    registry, _ = vault
    note = await registry.execute("vault_read", {"note": "engine design"})  # by title, case-insensitive
    assert note["path"] == "Engine.md"
    assert note["tags"] == ["space"]  # '#not-a-tag' sits in a code block
    assert {link["target"]: link["path"] for link in note["links"]} == {
        "Ada": "People/Ada Lovelace.md", "Apollo": "Projects/Apollo.md"}  # alias, frontmatter link
    apollo = await registry.execute("vault_read", {"note": "Projects/Apollo.md"})
    assert apollo["frontmatter"]["status"] == "active"
    assert sorted(apollo["tags"]) == ["project", "space"]
    daily = await registry.execute("vault_read", {"note": "2025-03-01"})
    assert {link["target"]: link["path"] for link in daily["links"]} == {
        "Ada Lovelace": "People/Ada Lovelace.md", "Nobody Yet": None}


async def test_backlinks_find_every_linking_note(vault):
    registry, _ = vault
    out = await registry.execute("vault_backlinks", {"note": "Ada Lovelace"})
    assert [b["path"] for b in out["backlinks"]] == ["Daily/2025-03-01.md", "Engine.md", "Projects/Apollo.md"]
    engine = next(b for b in out["backlinks"] if b["path"] == "Engine.md")
    assert engine["mentions"][0]["text"].startswith("Thrust figures. Ask [[Ada]]")


async def test_search_people_projects_tags(vault):
    registry, _ = vault
    found = await registry.execute("vault_search", {"query": "apollo"})
    assert found["results"][0]["path"] == "Projects/Apollo.md"  # title match ranks first
    assert "Broken.md" in [r["path"] for r in found["results"]]
    assert "Leak.md" not in [r["path"] for r in found["results"]]
    people = await registry.execute("vault_people", {})
    by_name = {p["name"]: p for p in people["people"]}
    assert by_name["Ada Lovelace"]["note"] == "People/Ada Lovelace.md"
    assert by_name["Ada Lovelace"]["mentioned_in"] == ["Projects/Apollo.md"]
    assert by_name["Grace Hopper"]["note"] is None
    projects = await registry.execute("vault_projects", {"name": "apo"})
    assert [p["name"] for p in projects["projects"]] == ["Apollo"]
    assert projects["projects"][0]["mentioned_in"] == ["Engine.md"]
    tags = await registry.execute("vault_tags", {})
    assert {t["tag"]: t["notes"] for t in tags["tags"]}["space"] == 2


@pytest.mark.parametrize("bad, code", [
    ("../secret.md", "reference_path_outside_root"),
    ("/etc/passwd.md", "reference_path_outside_root"),
    ("Leak.md", "reference_path_outside_root"),  # a symlink inside the vault pointing out of it
    ("Outside/secret.md", "reference_path_outside_root"),
    ("Nope", "reference_not_found"),
])
async def test_paths_are_confined(vault, bad, code):
    registry, _ = vault
    result = await call(registry, "vault_read", {"note": bad})
    assert isinstance(result.error, ToolError) and result.error.code == code
    assert result.receipt.outcome == "rejected"  # refused: nothing ran


async def test_bad_frontmatter_is_reported_not_fatal(vault):
    registry, conn = vault
    note = await registry.execute("vault_read", {"note": "Broken"})
    assert "frontmatter line 2" in note["problem"] and "body text" in note["content"]
    [health] = await check_provider_health([conn])
    assert health.status == "degraded" and health.details["notes"] == 5


async def test_context_and_cache_follow_edits(vault, vault_dir):
    registry, conn = vault
    block = await context_prompt([conn])
    assert "5 notes" in block and "#space (2)" in block
    write(vault_dir, "Projects/Apollo.md", "---\ntype: project\n---\nNow links [[Engine]] only.\n")
    out = await registry.execute("vault_backlinks", {"note": "Ada Lovelace"})
    assert "Projects/Apollo.md" not in [b["path"] for b in out["backlinks"]]


async def test_missing_root_is_unavailable(tmp_path):
    from openfunctions.providers import ProviderUnavailable

    with pytest.raises(ProviderUnavailable, match="does not exist"):
        await connected(VaultProvider(tmp_path / "nope"))


async def test_huge_note_and_frontmatter_are_bounded(vault, vault_dir):
    registry, _ = vault
    write(vault_dir, "Big.md", "---\nsummary: " + "x" * 30_000 + "\n---\n" + "line of text\n" * 5000)
    note = await registry.execute("vault_read", {"note": "Big"})
    assert note["frontmatter"] == {"truncated": "over 20000 characters; read the note's file instead"}
    assert len(note["content"]) == 40_000 and note["truncated"] is True
