"""Fingerprints, proofs and the completion fence; a later write invalidates a proof."""

from __future__ import annotations

import datetime as dt
import hashlib
import sys
from pathlib import Path

import pytest

from openfunctions.artifacts import ArtifactStore
from openfunctions.core import ToolExecutionContext, ToolRegistry
from openfunctions.work._catalog import Catalog
from openfunctions.work._errors import ProofInvalid
from openfunctions.work._grants import GrantStore
from openfunctions.work._steps import create_step_tools
from openfunctions.work._verification import (
    VerifierReceipt,
    check_completion,
    create_proof,
    environment_digest,
    fingerprint,
    input_manifest,
    subject_patterns,
)

pytestmark = pytest.mark.anyio

CATALOG = f"""
version = 1
workspace = "ws"

[steps.test]
kind = "command"
description = "the test suite: passes when src/a.py says ok"
argv = ["{sys.executable}", "-c", "import sys; sys.exit(0 if open('src/a.py').read() == 'ok' else 1)"]
verifier = true
effect = "read"
env = ["OF_VERIFY_ENV"]

[steps.write_src]
kind = "write_file"
description = "write"
paths = ["src/**"]
"""


def sha(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


def test_fingerprint_patterns_and_symlinks(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "node_modules" / "x").mkdir(parents=True)
    (ws / "src" / "a.py").write_bytes(b"a")
    (ws / "src" / "pkg" / "b.py").write_bytes(b"b")
    (ws / "src" / "pkg" / "c.txt").write_bytes(b"c")
    (ws / "node_modules" / "x" / "d.py").write_bytes(b"d")
    (ws / "src" / "passwd").symlink_to("/etc/passwd")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "secret.py").write_text("s")
    (ws / "src" / "outdir").symlink_to(tmp_path / "out")
    fp = fingerprint(ws, ["src/**"])
    assert fp["src/a.py"] == sha(b"a") and fp["src/pkg/b.py"] == sha(b"b") and fp["src/pkg/c.txt"] == sha(b"c")
    # links are recorded by their target text and never followed (nothing outside is read)
    assert fp["src/passwd"] == "symlink:" + sha(b"/etc/passwd")
    assert fp["src/outdir"].startswith("symlink:")
    assert not any("secret" in k for k in fp)
    assert list(fp) == sorted(fp)
    assert set(fingerprint(ws, ["**/*.py"])) == {"src/a.py", "src/pkg/b.py", "node_modules/x/d.py"}
    assert set(fingerprint(ws, ["src/*.py"])) == {"src/a.py"}
    m1 = input_manifest(ws, ["src/**"])
    (ws / "src" / "a.py").write_bytes(b"A")
    m2 = input_manifest(ws, ["src/**"])
    assert m1["count"] == m2["count"] == 5 and m1["digest"] != m2["digest"]


def test_environment_digest_tracks_allowed_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "c.toml").write_text(CATALOG)
    cat = Catalog.load(tmp_path / "c.toml")
    monkeypatch.setenv("OF_VERIFY_ENV", "1")
    d1 = environment_digest(cat)
    assert environment_digest(cat) == d1
    monkeypatch.setenv("OF_VERIFY_ENV", "2")
    assert environment_digest(cat) != d1
    monkeypatch.setenv("OF_UNRELATED", "x")
    d2 = environment_digest(cat)
    monkeypatch.setenv("OF_UNRELATED", "y")
    assert environment_digest(cat) == d2
    assert subject_patterns(cat) == ("src/**",)


class World:
    """A catalog, a grant, real step tools and a controller-like mutation epoch."""

    def __init__(self, tmp: Path) -> None:
        self.ws = tmp / "ws"
        (self.ws / "src").mkdir(parents=True)
        (self.ws / "src" / "a.py").write_text("ok")
        (tmp / "c.toml").write_text(CATALOG)
        self.catalog = Catalog.load(tmp / "c.toml")
        self.grants = GrantStore(tmp / "grants.journal")
        self.registry = ToolRegistry(create_step_tools(self.catalog, store=ArtifactStore(tmp / "art")))
        self.ctx = ToolExecutionContext(principal="agent", metadata={"granted_paths": ["src/**"], "artifact_scope": "att"})
        self.epoch = 0
        self.patterns = list(subject_patterns(self.catalog))

    async def write(self, path: str, content: str) -> None:
        r = await self.registry.execute_detailed("of_step.write_src", {"path": path, "content": content}, self.ctx)
        assert r.ok, r.error
        self.epoch += 1  # the controller advances the epoch on every effect

    async def verify(self, plan_digest: str = "sha256:plan"):
        manifest = input_manifest(self.ws, self.patterns)
        before = fingerprint(self.ws, self.patterns)
        r = await self.registry.execute_detailed("of_step.test", {}, self.ctx)
        receipt = VerifierReceipt.from_evidence("test", r.value, receipt_id=r.receipt.receipt_id, accepted=r.ok)
        after = fingerprint(self.ws, self.patterns)
        return create_proof(
            plan_digest=plan_digest, catalog_digest=self.catalog.digest, environment_digest=environment_digest(self.catalog),
            input_manifest=manifest, fingerprints_before=before, fingerprints_after=after,
            mutation_epoch=self.epoch, receipts=[receipt], attempt_id="att",
        )

    async def complete(self, proof, **kw):
        grant = kw.pop("grant", None) or (await self.grants.active_for("agent"))[0]
        return check_completion(
            proof, catalog_digest=kw.pop("catalog_digest", self.catalog.digest), grant=grant,
            fingerprints=fingerprint(self.ws, self.patterns), mutation_epoch=self.epoch,
            current_epoch=lambda: self.epoch, **kw,
        )


@pytest.fixture
async def world(tmp_path: Path) -> World:
    w = World(tmp_path)
    await w.grants.issue(principal="agent", steps=["test", "write_src"], paths=["src/**"], ttl=dt.timedelta(hours=1))
    return w


async def test_fresh_proof_completes_and_fence_passes(world: World) -> None:
    proof = await world.verify()
    assert proof.accepted and proof.tests_passed
    assert proof.receipts[0].receipt_id and proof.receipts[0].exit_code == 0
    assert proof.summary()["stable"] is True
    fence = await world.complete(proof, plan_digest="sha256:plan")
    fence()  # nothing moved: no error


async def test_write_after_verification_invalidates_the_proof(world: World) -> None:
    proof = await world.verify()
    await world.write("src/b.py", "new file")
    with pytest.raises(ProofInvalid, match="mutation epoch 0 -> 1"):
        await world.complete(proof)
    # a fresh verification completes again
    fresh = await world.verify()
    (await world.complete(fresh))()


async def test_outside_write_changes_fingerprints(world: World) -> None:
    proof = await world.verify()
    (world.ws / "src" / "a.py").write_text("ok")  # same content: still fine
    (await world.complete(proof))()
    (world.ws / "src" / "c.py").write_text("sneaked in")  # no epoch advance, but the files moved
    with pytest.raises(ProofInvalid, match="added: src/c.py"):
        await world.complete(proof)


async def test_fence_catches_a_write_between_check_and_transition(world: World) -> None:
    proof = await world.verify()
    fence = await world.complete(proof)
    await world.write("src/late.py", "x")
    with pytest.raises(ProofInvalid, match="after the completion check"):
        fence()


async def test_failed_tests_and_acceptance_are_separate_facts(world: World) -> None:
    (world.ws / "src" / "a.py").write_text("broken")
    proof = await world.verify()
    assert proof.accepted is True and proof.tests_passed is False
    with pytest.raises(ProofInvalid, match="did not pass .failed: test"):
        await world.complete(proof)
    not_run = VerifierReceipt.from_evidence("test", None, receipt_id=None, accepted=False)
    p2 = create_proof(
        plan_digest="p", catalog_digest=world.catalog.digest, environment_digest="e", input_manifest={},
        fingerprints_before={}, fingerprints_after={}, mutation_epoch=0, receipts=[not_run],
    )
    assert p2.accepted is False and p2.tests_passed is False
    with pytest.raises(ProofInvalid, match="not accepted"):
        await world.complete(p2)
    with pytest.raises(ProofInvalid, match="no verification proof"):
        await world.complete(None)


async def test_catalog_plan_grant_and_tampering(world: World) -> None:
    proof = await world.verify(plan_digest="sha256:plan-a")
    with pytest.raises(ProofInvalid, match="current catalog"):
        await world.complete(proof, catalog_digest="sha256:other")
    with pytest.raises(ProofInvalid, match="not the active plan"):
        await world.complete(proof, plan_digest="sha256:plan-b")
    g = (await world.grants.active_for("agent"))[0]
    revoked = await world.grants.revoke(g.grant_id, by="op")
    with pytest.raises(ProofInvalid, match="revoked"):
        await world.complete(proof, grant=revoked)
    g2 = await world.grants.issue(principal="agent", steps=["test"], ttl=dt.timedelta(minutes=1))
    with pytest.raises(ProofInvalid, match="expired"):
        await world.complete(proof, grant=g2, now=g2.expires_at)
    forged = proof.model_copy(update={"tests_passed": True, "mutation_epoch": 99})
    with pytest.raises(ProofInvalid, match="altered"):
        await world.complete(forged, grant=g2)
