"""Grants: durable issue/revoke in a journal, lock-free reads, the operator CLI."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from openfunctions.work._errors import GrantNotFound, GrantStoreCorrupt
from openfunctions.work._grants import GrantStore, parse_ttl
from openfunctions.work.cli import add_commands

pytestmark = pytest.mark.anyio


def cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the grant CLI as a real separate process (the operator's side)."""
    return subprocess.run(
        [sys.executable, "-m", "openfunctions.work.cli", "grant", *args, "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=60,
    )


async def test_issue_list_revoke_roundtrip(tmp_path: Path) -> None:
    store = GrantStore.in_data_dir(tmp_path)
    g = await store.issue(principal="agent", steps=["test", "write_src"], paths=["src/**"], ttl=dt.timedelta(hours=8), issuer="op")
    assert g.grant_id.startswith("grant_") and g.issuer == "op"
    assert (g.expires_at - g.issued_at) == dt.timedelta(hours=8)
    assert [x.grant_id for x in await store.active_for("agent")] == [g.grant_id]
    assert await store.active_for("someone-else") == []
    # a second store object (another process's view) reads the same durable state
    other = GrantStore.in_data_dir(tmp_path)
    assert (await other.get(g.grant_id)).steps == ("test", "write_src")
    r = await store.revoke(g.grant_id, by="op2")
    assert r.revoked_at is not None and r.revoked_by == "op2"
    assert await other.active_for("agent") == []
    assert (await other.get(g.grant_id)).status(dt.datetime.now(dt.UTC)) == "revoked"
    again = await store.revoke(g.grant_id, by="op3")  # idempotent: first revocation wins
    assert again.revoked_by == "op2"
    with pytest.raises(GrantNotFound):
        await store.revoke("grant_nope")
    # private files
    p = tmp_path / "work" / "grants.journal"
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert stat.S_IMODE(p.parent.stat().st_mode) == 0o700


async def test_expiry_uses_the_given_clock(tmp_path: Path) -> None:
    store = GrantStore(tmp_path / "g.journal")
    t0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
    g = await store.issue(principal="a", steps=["s"], ttl=dt.timedelta(hours=1), now=t0)
    assert [x.grant_id for x in await store.active_for("a", t0 + dt.timedelta(minutes=59))] == [g.grant_id]
    assert await store.active_for("a", t0 + dt.timedelta(hours=1)) == []
    assert g.status(t0 + dt.timedelta(hours=2)) == "expired"


async def test_bad_grants_refused(tmp_path: Path) -> None:
    store = GrantStore(tmp_path / "g.journal")
    with pytest.raises(ValueError, match="at least one step"):
        await store.issue(principal="a", steps=[], ttl=dt.timedelta(hours=1))
    with pytest.raises(ValueError, match="'..'"):
        await store.issue(principal="a", steps=["s"], paths=["../x"], ttl=dt.timedelta(hours=1))
    with pytest.raises(ValueError, match="absolute"):
        await store.issue(principal="a", steps=["s"], paths=["/etc/**"], ttl=dt.timedelta(hours=1))
    with pytest.raises(ValueError):
        await store.issue(principal="", steps=["s"], ttl=dt.timedelta(hours=1))
    with pytest.raises(ValueError, match="no wildcards"):
        await store.issue(principal="a", steps=["*"], ttl=dt.timedelta(hours=1))
    assert await store.list() == []


async def test_malformed_record_fails_closed(tmp_path: Path) -> None:
    from openfunctions.core.journal import JournalLog

    p = tmp_path / "g.journal"
    store = GrantStore(p)
    g = await store.issue(principal="a", steps=["s"], ttl=dt.timedelta(hours=1))
    log = await JournalLog.open(p)
    await log.append("grant.revoked", {"v": 1, "grant_id": g.grant_id})  # no revoked_at: unreadable revocation
    await log.close()
    with pytest.raises(GrantStoreCorrupt, match="seq"):
        await store.active_for("a")


def test_parse_ttl() -> None:
    assert parse_ttl("8h") == dt.timedelta(hours=8)
    assert parse_ttl("1h30m") == dt.timedelta(minutes=90)
    assert parse_ttl("45s") == dt.timedelta(seconds=45)
    for bad in ("", "8", "8x", "-1h", "0s", "400d"):
        with pytest.raises(ValueError):
            parse_ttl(bad)


def test_add_commands_builds_a_parser(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="openfunctions-mcp")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["grant", "issue", "--principal", "p", "--steps", "a,b", "--paths", "src/**",
                              "--ttl", "8h", "--data-dir", str(tmp_path), "--json"])
    assert args.func(args) == 0
    issued = json.loads(capsys.readouterr().out)
    assert issued["steps"] == ["a", "b"] and issued["paths"] == ["src/**"] and issued["status"] == "active"
    args = parser.parse_args(["grant", "list", "--json", "--data-dir", str(tmp_path)])
    assert args.func(args) == 0
    assert [r["grant_id"] for r in json.loads(capsys.readouterr().out)] == [issued["grant_id"]]
    args = parser.parse_args(["grant", "issue", "--principal", "p", "--steps", "a", "--ttl", "forever", "--data-dir", str(tmp_path)])
    assert args.func(args) == 2
    assert "TTL 'forever'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["grant", "issue", "--steps", "a", "--ttl", "1h"])  # --principal is required


@pytest.mark.slow  # five CLI processes, each importing the package
async def test_cli_processes_and_a_live_reader(tmp_path: Path) -> None:
    """The CLI issues and revokes in other processes; this process's store sees both."""
    server_view = GrantStore.in_data_dir(tmp_path)
    assert await server_view.active_for("agent") == []
    r = cli(tmp_path, "issue", "--principal", "agent", "--steps", "test", "--paths", "src/**", "--ttl", "8h", "--issuer", "ops")
    assert r.returncode == 0, r.stderr
    gid = r.stdout.strip()
    assert [g.grant_id for g in await server_view.active_for("agent")] == [gid]
    r = cli(tmp_path, "list")
    assert gid in r.stdout and "active" in r.stdout
    r = cli(tmp_path, "revoke", gid, "--by", "ops")
    assert r.returncode == 0 and "revoked" in r.stdout
    assert await server_view.active_for("agent") == []
    r = cli(tmp_path, "list", "--all", "--json")
    rows = json.loads(r.stdout)
    assert rows[0]["status"] == "revoked" and rows[0]["revoked_by"] == "ops"
    r = cli(tmp_path, "revoke", "grant_unknown")
    assert r.returncode == 2 and "no grant 'grant_unknown'" in r.stderr  # bad input


def test_cli_catalog_binding_checks_steps(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    cat = tmp_path / "c.toml"
    cat.write_text("version = 1\nworkspace = 'ws'\n[steps.snap]\nkind = 'fingerprint'\ndescription = 'd'\npaths = ['**']\n")
    r = cli(tmp_path, "issue", "--principal", "a", "--steps", "snp", "--ttl", "1h", "--catalog", str(cat))
    assert r.returncode == 2 and "did you mean 'snap'" in r.stderr
    r = cli(tmp_path, "issue", "--principal", "a", "--steps", "snap", "--ttl", "1h", "--catalog", str(cat), "--json")
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr
    assert json.loads(r.stdout)["catalog_digest"].startswith("sha256:")
    cat.write_text(cat.read_text() + "[steps.w]\nkind = 'write_file'\ndescription = 'd'\npaths = ['src/**']\n")
    r = cli(tmp_path, "issue", "--principal", "a", "--steps", "w", "--ttl", "1h", "--catalog", str(cat))
    assert r.returncode == 0 and "take paths, but --paths grants none" in r.stderr


async def test_concurrent_issuers_wait_for_the_lock(tmp_path: Path) -> None:
    """Each issue opens the writer (flock); concurrent issuers queue instead of failing."""
    import anyio

    store = GrantStore(tmp_path / "g.journal")
    ids: list[str] = []

    async def one(i: int) -> None:
        g = await GrantStore(store.path).issue(principal=f"p{i}", steps=["s"], ttl=dt.timedelta(hours=1))
        ids.append(g.grant_id)

    async with anyio.create_task_group() as tg:
        for i in range(6):
            tg.start_soon(one, i)
    assert sorted(g.grant_id for g in await store.list()) == sorted(ids) and len(ids) == 6


def test_data_dir_env_matches_the_server_default(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "OPENFUNCTIONS_MCP_DATA_DIR": str(tmp_path / "envdir")}
    r = subprocess.run(
        [sys.executable, "-m", "openfunctions.work.cli", "grant", "issue", "--principal", "a", "--steps", "s", "--ttl", "1h"],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "envdir" / "work" / "grants.journal").exists()


def test_issue_without_catalog_checks_the_servers_catalog_or_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    """Without --catalog, a step name is checked against the server's catalog, and no --paths is warned about."""
    monkeypatch.delenv("OPENFUNCTIONS_WORK_CATALOG", raising=False)
    parser = argparse.ArgumentParser(prog="openfunctions-mcp")
    add_commands(parser.add_subparsers(dest="command", required=True))

    def run(*argv: str) -> int:
        args = parser.parse_args(["grant", *argv, "--data-dir", str(tmp_path)])
        return args.func(args)

    assert run("issue", "--principal", "p", "--steps", "anything", "--ttl", "1h") == 0
    err = capsys.readouterr().err
    assert "no catalog to check step names against" in err and str(tmp_path / "work" / "catalog.toml") in err
    assert "--paths grants no path" in err
    (tmp_path / "work" / "ws").mkdir(parents=True)
    (tmp_path / "work" / "catalog.toml").write_text(
        "version = 1\nworkspace = 'ws'\n[steps.snap]\nkind = 'fingerprint'\ndescription = 'd'\npaths = ['**']\n")
    assert run("issue", "--principal", "p", "--steps", "snp", "--ttl", "1h") == 2
    assert "did you mean 'snap'" in capsys.readouterr().err
    assert run("revoke", "grant_" + "0" * 32) == 2


async def test_refusals_say_where_grants_were_read_and_how_to_name_a_principal(tmp_path: Path) -> None:
    from openfunctions.work._authority import Authority
    from openfunctions.work._catalog import Catalog
    from openfunctions.work._errors import GrantDenied

    (tmp_path / "ws").mkdir()
    (tmp_path / "c.toml").write_text("version = 1\nworkspace = 'ws'\n[steps.snap]\nkind = 'fingerprint'\ndescription = 'd'\npaths = ['**']\n")
    cat = Catalog.load(tmp_path / "c.toml")
    auth = Authority(GrantStore.in_data_dir(tmp_path), cat)
    with pytest.raises(GrantDenied, match="--principal"):
        await auth.check(principal=None, step=cat.step("snap"))
    with pytest.raises(GrantDenied, match="no active grants in .*grants.journal"):
        await auth.check(principal="agent", step=cat.step("snap"))
