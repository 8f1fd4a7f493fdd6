"""Authority at every effect: step, catalog digest, paths (.., absolute, symlinks), expiry, revocation, lease."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import pytest

from openfunctions.work._authority import Authority
from openfunctions.work._catalog import Catalog
from openfunctions.work._errors import GrantDenied, GrantExpired, GrantRevoked, LeaseLost, PathOutsideGrant
from openfunctions.work._grants import GrantStore

pytestmark = pytest.mark.anyio

CATALOG = """
version = 1
workspace = "ws"

[steps.write_src]
kind = "write_file"
description = "write under src"
paths = ["src/**"]

[steps.read_any]
kind = "read_file"
description = "read"
paths = ["**"]

[steps.test]
kind = "command"
description = "tests"
argv = ["true"]
"""


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Catalog, GrantStore, Path]:
    ws = tmp_path / "ws"
    (ws / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (ws / "src" / "escape").symlink_to(tmp_path / "outside")           # dir symlink pointing out
    (ws / "src" / "passwd").symlink_to("/etc/passwd")                   # file symlink pointing out
    (ws / "src" / "inner").symlink_to(ws / "src" / "pkg")               # symlink staying inside
    (ws / "docs").mkdir()
    (ws / "src" / "to_docs").symlink_to(ws / "docs")                    # inside the workspace, outside the pattern
    (tmp_path / "c.toml").write_text(CATALOG)
    return Catalog.load(tmp_path / "c.toml"), GrantStore(tmp_path / "data" / "grants.journal"), tmp_path


async def test_allowed_effect_returns_the_grant(setup) -> None:
    cat, store, _ = setup
    g = await store.issue(principal="agent", steps=["write_src", "test"], paths=["src/**"], ttl=dt.timedelta(hours=8))
    auth = Authority(store, cat)
    got = await auth.check(principal="agent", step=cat.step("write_src"), paths=["src/pkg/mod.py"])
    assert got.grant_id == g.grant_id
    assert (await auth.check(principal="agent", step=cat.step("write_src"), paths=["src/inner/x.py"])).grant_id == g.grant_id
    assert (await auth.check(principal="agent", step=cat.step("test"))).grant_id == g.grant_id
    assert [x.grant_id for x in await auth.visible_grants("agent")] == [g.grant_id]


async def test_step_outside_grant_and_missing_principal(setup) -> None:
    cat, store, _ = setup
    await store.issue(principal="agent", steps=["test"], ttl=dt.timedelta(hours=1))
    auth = Authority(store, cat)
    with pytest.raises(GrantDenied) as ei:
        await auth.check(principal="agent", step=cat.step("write_src"), paths=["src/a.py"])
    assert "no grant for step 'write_src'" in str(ei.value) and "test" in str(ei.value)
    assert type(ei.value) is GrantDenied
    with pytest.raises(GrantDenied, match="no principal"):
        await auth.check(principal=None, step=cat.step("test"))
    with pytest.raises(GrantDenied, match="no grant"):
        await auth.check(principal="mallory", step=cat.step("test"))


@pytest.mark.parametrize(
    "path, fragment",
    [
        ("../outside/x", "contains '..'"),
        ("src/../../outside/x", "contains '..'"),
        ("/etc/passwd", "absolute"),
        ("~/x", "absolute"),
        ("src/escape/x.py", "outside the workspace"),
        ("src/passwd", "outside the workspace"),
        ("src/to_docs/x.md", "outside step 'write_src'"),
        ("docs/x.md", "outside step 'write_src'"),
        ("", "non-empty"),
    ],
)
async def test_paths_outside_are_refused(setup, path: str, fragment: str) -> None:
    cat, store, _ = setup
    await store.issue(principal="agent", steps=["write_src"], paths=["src/**"], ttl=dt.timedelta(hours=1))
    with pytest.raises(PathOutsideGrant) as ei:
        await Authority(store, cat).check(principal="agent", step=cat.step("write_src"), paths=[path])
    assert fragment in str(ei.value)
    assert ei.value.code == "path_outside_grant"


async def test_path_inside_catalog_but_outside_grant_pattern(setup) -> None:
    cat, store, _ = setup
    await store.issue(principal="agent", steps=["write_src", "read_any"], paths=["src/pkg/**"], ttl=dt.timedelta(hours=1))
    auth = Authority(store, cat)
    await auth.check(principal="agent", step=cat.step("write_src"), paths=["src/pkg/a.py"])
    with pytest.raises(PathOutsideGrant, match="matches no granted path pattern"):
        await auth.check(principal="agent", step=cat.step("write_src"), paths=["src/other.py"])
    with pytest.raises(PathOutsideGrant, match="matches no granted path pattern"):
        await auth.check(principal="agent", step=cat.step("read_any"), paths=["docs/x.md"])
    # every path of the call must be covered
    with pytest.raises(PathOutsideGrant):
        await auth.check(principal="agent", step=cat.step("write_src"), paths=["src/pkg/a.py", "src/b.py"])


async def test_expired_grant(setup) -> None:
    cat, store, _ = setup
    t0 = dt.datetime.now(dt.UTC)
    g = await store.issue(principal="agent", steps=["test"], ttl=dt.timedelta(minutes=5), now=t0)
    auth = Authority(store, cat)
    await auth.check(principal="agent", step=cat.step("test"), now=t0 + dt.timedelta(minutes=4))
    with pytest.raises(GrantExpired) as ei:
        await auth.check(principal="agent", step=cat.step("test"), now=t0 + dt.timedelta(minutes=5))
    assert g.grant_id in str(ei.value) and "expired" in str(ei.value)


async def test_revoked_mid_attempt_by_the_cli_in_another_process(setup) -> None:
    cat, store, tmp = setup
    data_dir = tmp / "dd"
    store = GrantStore.in_data_dir(data_dir)
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "openfunctions.work.cli", "grant", *a, "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=60,
    )
    r = run("issue", "--principal", "agent", "--steps", "write_src", "--paths", "src/**", "--ttl", "8h")
    assert r.returncode == 0, r.stderr
    gid = r.stdout.strip()
    auth = Authority(store, cat)
    assert (await auth.check(principal="agent", step=cat.step("write_src"), paths=["src/a.py"])).grant_id == gid
    assert run("revoke", gid).returncode == 0
    with pytest.raises(GrantRevoked) as ei:
        await auth.check(principal="agent", step=cat.step("write_src"), paths=["src/a.py"])
    assert gid in str(ei.value)


async def test_catalog_digest_binding(setup) -> None:
    cat, store, _ = setup
    await store.issue(principal="agent", steps=["test"], ttl=dt.timedelta(hours=1), catalog_digest="sha256:" + "0" * 64)
    with pytest.raises(GrantDenied, match="bound to another catalog"):
        await Authority(store, cat).check(principal="agent", step=cat.step("test"))
    await store.issue(principal="agent", steps=["test"], ttl=dt.timedelta(hours=1), catalog_digest=cat.digest)
    await Authority(store, cat).check(principal="agent", step=cat.step("test"))


async def test_step_from_another_catalog_is_refused(setup, tmp_path: Path) -> None:
    cat, store, tmp = setup
    (tmp / "c2.toml").write_text(CATALOG.replace('argv = ["true"]', 'argv = ["false"]'))
    other = Catalog.load(tmp / "c2.toml")
    await store.issue(principal="agent", steps=["test"], ttl=dt.timedelta(hours=1))
    with pytest.raises(GrantDenied, match="does not belong to the current catalog"):
        await Authority(store, cat).check(principal="agent", step=other.step("test"))


async def test_lease_hook(setup) -> None:
    cat, store, _ = setup
    await store.issue(principal="agent", steps=["test"], ttl=dt.timedelta(hours=1))
    auth = Authority(store, cat)
    calls: list[str] = []

    async def live() -> None:
        calls.append("checked")

    def lost() -> None:
        raise LeaseLost("generation 1 is stale")

    class Expired:
        expires_at = 1.0

    await auth.check(principal="agent", step=cat.step("test"), lease=live)
    assert calls == ["checked"]
    with pytest.raises(LeaseLost, match="stale"):
        await auth.check(principal="agent", step=cat.step("test"), lease=lost)
    with pytest.raises(LeaseLost, match="expired"):
        await auth.check(principal="agent", step=cat.step("test"), lease=Expired())
