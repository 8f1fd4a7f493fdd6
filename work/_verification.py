"""Verification: fingerprints, environment and input digests, proofs, and the completion fence.

A :class:`Proof` binds *what was verified* to *the facts it was verified
under*: the plan digest, the catalog digest, the environment digest, the
input manifest (workspace files in scope with their digests), the
fingerprints of those files before and after the verifier ran, the
controller's mutation epoch, and the verifier receipts. ``accepted`` (every
verifier call was accepted by the executor and ran to an exit status) and
``tests_passed`` (every verifier exited 0, none timed out) are separate facts.

Completion (:func:`check_completion`) re-checks the current catalog digest,
grant and plan, compares freshly re-read fingerprints and the current
mutation epoch with the proof, and returns a synchronous *fence*: the
controller calls it immediately before the terminal transition, after its
last awaited authority check; it re-verifies the cheap in-memory facts
(mutation epoch unchanged, grant not expired) with no await in between.
Any relevant write after verification advances the epoch or changes a
fingerprint, so the proof no longer completes anything.

Proof format (version 1, stored by the controller in its attempt journal)::

    {"version": 1, "attempt_id": str|null, "plan_digest": "sha256:..",
     "catalog_digest": "sha256:..", "environment_digest": "sha256:..",
     "input_manifest": {"patterns": [...], "files": {relpath: "sha256:.."}, "count": n, "digest": "sha256:.."},
     "fingerprints_before": {relpath: "sha256:.."}, "fingerprints_after": {...},
     "mutation_epoch": int, "receipts": [VerifierReceipt...], "accepted": bool,
     "tests_passed": bool, "created_at": ISO-8601 UTC, "proof_digest": "sha256:.."}

``proof_digest`` is the digest (canonical JSON, see core) of every other
field. A fingerprint value is ``sha256:<hex>`` of a regular file's bytes,
``symlink:sha256:<hex>`` of a symlink's target text (links are never followed),
or ``unreadable:<ERRNO>`` (e.g. ``unreadable:EACCES``) for a file that could not be read.
"""

from __future__ import annotations

import datetime as _dt
import errno
import hashlib
import os
import platform
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from openfunctions.core import digest, utc_timestamp

from ._catalog import Catalog
from ._errors import ProofInvalid
from ._grants import Grant, utc_datetime
from ._paths import matches

PROOF_VERSION = 1
_CHUNK = 1024 * 1024


# -- fingerprints -------------------------------------------------------------


def open_regular(path: str | os.PathLike[str], *, dir_fd: int | None = None) -> int:
    """Open a regular file for reading without following a final symlink and without
    blocking on a FIFO; a directory raises IsADirectoryError, any other non-regular file OSError(EINVAL)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC, dir_fd=dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(path))
        raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    os.set_blocking(fd, True)
    return fd


def file_sha256(path: str | os.PathLike[str]) -> str:
    """``sha256:<hex>`` of a file's bytes, streamed (the file is opened without following a final symlink)."""
    h = hashlib.sha256()
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _literal_prefix(pattern: str) -> list[str]:
    out = []
    for seg in pattern.split("/")[:-1]:
        if any(c in seg for c in "*?"):
            break
        out.append(seg)
    return out


def _may_contain(dir_segs: list[str], prefixes: list[list[str]]) -> bool:
    for pre in prefixes:
        n = min(len(pre), len(dir_segs))
        if pre[:n] == dir_segs[:n]:
            return True
    return False


def fingerprint(workspace: str | os.PathLike[str], patterns: Iterable[str]) -> dict[str, str]:
    """``{relpath: digest}`` for every file under ``workspace`` matching any pattern, sorted by path.

    Directories are walked without following symlinks; a symlink matching a
    pattern is recorded by its target text (``symlink:sha256:..``), so
    retargeting it changes the fingerprint without ever reading outside the
    workspace. Files that vanish during the walk are skipped.
    """
    root = os.path.realpath(workspace)
    pats = [p for p in patterns]
    prefixes = [_literal_prefix(p) for p in pats]
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        dir_segs = [] if rel_dir == "." else rel_dir.split(os.sep)
        # prune directories no pattern can reach (``src/**`` never walks ``node_modules``)
        keep = []
        for d in dirnames:
            full = os.path.join(dirpath, d)
            if os.path.islink(full):
                filenames.append(d)  # a symlinked dir is a link entry, not a tree to walk
            elif _may_contain(dir_segs + [d], prefixes):
                keep.append(d)
        dirnames[:] = sorted(keep)
        for name in filenames:
            rel = "/".join(dir_segs + [name])
            if not any(matches(rel, p) for p in pats):
                continue
            full = os.path.join(dirpath, name)
            try:
                if os.path.islink(full):
                    target = os.readlink(full)
                    out[rel] = "symlink:sha256:" + hashlib.sha256(os.fsencode(target)).hexdigest()
                elif os.path.isfile(full):
                    out[rel] = file_sha256(full)
            except FileNotFoundError:
                continue
            except OSError as exc:  # unreadable, or swapped for a FIFO/dir mid-walk: still a recorded fact
                out[rel] = f"unreadable:{errno.errorcode.get(exc.errno or 0, exc.errno)}"
    return dict(sorted(out.items()))


def diff_fingerprints(old: Mapping[str, str], new: Mapping[str, str]) -> dict[str, list[str]]:
    """``{"added": [...], "removed": [...], "changed": [...]}`` (sorted relpaths)."""
    return {
        "added": sorted(set(new) - set(old)),
        "removed": sorted(set(old) - set(new)),
        "changed": sorted(k for k in set(old) & set(new) if old[k] != new[k]),
    }


def subject_patterns(catalog: Catalog) -> tuple[str, ...]:
    """The workspace files a proof is about: every path pattern the catalog declares
    (write/read/fingerprint steps and command readbacks), or ``**`` if it declares none."""
    pats: list[str] = []
    for s in catalog.steps.values():
        pats.extend(s.paths)
        if s.readback is not None:
            pats.extend(s.readback.paths)
    return tuple(dict.fromkeys(pats)) or ("**",)


def input_manifest(
    workspace: str | os.PathLike[str], patterns: Iterable[str], *, files: dict[str, str] | None = None
) -> dict[str, Any]:
    """The files in scope with their digests, plus a digest of the whole manifest.

    ``files``: a :func:`fingerprint` of the same patterns taken just now (the
    controller has one), so the subject is not hashed twice.
    """
    pats = list(patterns)
    if files is None:
        files = fingerprint(workspace, pats)
    return {"patterns": pats, "files": files, "count": len(files), "digest": digest({"patterns": pats, "files": files})}


def environment_facts(catalog: Catalog, steps: Iterable[str] | None = None) -> dict[str, Any]:
    """What the verifiers run with: platform, Python, each verifier's program (resolved, hashed)
    and the digests (never the values) of the environment variables it receives."""
    names = list(steps) if steps is not None else [n for n, s in sorted(catalog.steps.items()) if s.verifier]
    progs: dict[str, Any] = {}
    env: dict[str, str | None] = {}
    for n in names:
        s = catalog.step(n)
        if s.kind != "command":
            continue
        prog = s.argv[0]
        where = shutil.which(prog, path=os.environ.get("PATH")) if os.sep not in prog else os.path.join(catalog.workspace, s.cwd, prog)
        entry: dict[str, Any] = {"path": None, "sha256": None}
        if where and os.path.isfile(where):
            real = os.path.realpath(where)
            entry = {"path": real, "sha256": file_sha256(real)}
        progs[prog] = entry
        for e in s.env:
            v = os.environ.get(e)
            env[e] = None if v is None else "sha256:" + hashlib.sha256(v.encode("utf-8", "surrogateescape")).hexdigest()
        for k, v in s.env_set:
            env[k] = "sha256:" + hashlib.sha256(v.encode()).hexdigest()
    return {
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "workspace": str(catalog.workspace),
        "programs": progs,
        "env": dict(sorted(env.items())),
    }


def environment_digest(catalog: Catalog, steps: Iterable[str] | None = None) -> str:
    """Digest of :func:`environment_facts` (a changed interpreter or tool binary changes it)."""
    return digest(environment_facts(catalog, steps))


# -- proofs -------------------------------------------------------------------


class VerifierReceipt(BaseModel):
    """One verifier run as evidence: which step, its executor receipt, and its outcome."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    step: str
    receipt_id: str | None = None
    accepted: bool = Field(description="the executor accepted and ran the call to an exit status")
    exit_code: int | None = None
    timed_out: bool = False
    stdout_sha256: str | None = None
    stderr_sha256: str | None = None

    @property
    def passed(self) -> bool:
        return self.accepted and self.exit_code == 0 and not self.timed_out

    @classmethod
    def from_evidence(cls, step: str, evidence: Mapping[str, Any] | None, *, receipt_id: str | None, accepted: bool) -> VerifierReceipt:
        """Build from a command step's evidence payload (see :mod:`openfunctions.work._steps`)."""
        ev = evidence or {}
        return cls(
            step=step,
            receipt_id=receipt_id,
            # ran to an exit status (or was stopped by its timeout): the call itself was accepted
            accepted=accepted and (ev.get("exit_code") is not None or bool(ev.get("timed_out"))),
            exit_code=ev.get("exit_code"),
            timed_out=bool(ev.get("timed_out", False)),
            stdout_sha256=(ev.get("stdout") or {}).get("sha256"),
            stderr_sha256=(ev.get("stderr") or {}).get("sha256"),
        )


class Proof(BaseModel):
    """A verification proof (see the module docstring). Build with :func:`create_proof`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = PROOF_VERSION
    attempt_id: str | None = None
    plan_digest: str
    catalog_digest: str
    environment_digest: str
    input_manifest: dict[str, Any]
    fingerprints_before: dict[str, str]
    fingerprints_after: dict[str, str]
    mutation_epoch: int
    receipts: tuple[VerifierReceipt, ...]
    accepted: bool
    tests_passed: bool
    created_at: str
    proof_digest: str

    def body(self) -> dict[str, Any]:
        d = self.model_dump(mode="json")
        d.pop("proof_digest")
        return d

    def summary(self) -> dict[str, Any]:
        """A small view for bounded replies (no file maps)."""
        return {
            "proof_digest": self.proof_digest,
            "plan_digest": self.plan_digest,
            "catalog_digest": self.catalog_digest,
            "environment_digest": self.environment_digest,
            "input_manifest_digest": self.input_manifest.get("digest"),
            "files": len(self.fingerprints_after),
            "stable": self.fingerprints_before == self.fingerprints_after,
            "mutation_epoch": self.mutation_epoch,
            "accepted": self.accepted,
            "tests_passed": self.tests_passed,
            "receipts": [r.model_dump(mode="json") for r in self.receipts],
            "created_at": self.created_at,
        }


def create_proof(
    *,
    plan_digest: str,
    catalog_digest: str,
    environment_digest: str,
    input_manifest: Mapping[str, Any],
    fingerprints_before: Mapping[str, str],
    fingerprints_after: Mapping[str, str],
    mutation_epoch: int,
    receipts: Iterable[VerifierReceipt],
    attempt_id: str | None = None,
    created_at: str | None = None,
) -> Proof:
    """Assemble a proof. ``accepted`` and ``tests_passed`` are derived from the receipts;
    with no receipt both are false (a proof needs at least one verifier run)."""
    rs = tuple(receipts)
    fields: dict[str, Any] = {
        "version": PROOF_VERSION,
        "attempt_id": attempt_id,
        "plan_digest": plan_digest,
        "catalog_digest": catalog_digest,
        "environment_digest": environment_digest,
        "input_manifest": dict(input_manifest),
        "fingerprints_before": dict(fingerprints_before),
        "fingerprints_after": dict(fingerprints_after),
        "mutation_epoch": mutation_epoch,
        "receipts": [r.model_dump(mode="json") for r in rs],
        "accepted": bool(rs) and all(r.accepted for r in rs),
        "tests_passed": bool(rs) and all(r.passed for r in rs),
        "created_at": created_at or utc_timestamp(),
    }
    return Proof.model_validate({**fields, "proof_digest": digest(fields)})


def check_completion(
    proof: Proof | None,
    *,
    catalog_digest: str,
    grant: Grant | None,
    fingerprints: Mapping[str, str],
    mutation_epoch: int,
    plan_digest: str | None = None,
    current_epoch: Callable[[], int] | None = None,
    now: _dt.datetime | None = None,
    clock: Callable[[], _dt.datetime] = utc_datetime,
) -> Callable[[], None]:
    """Check a proof against the current facts; return the synchronous completion fence.

    ``fingerprints`` must be re-read independently by the caller (e.g.
    ``fingerprint(catalog.workspace, proof.input_manifest["patterns"])``),
    never copied from the proof. ``grant`` is the grant the caller's last
    awaited authority check returned. Raises :class:`ProofInvalid` naming the
    first fact that does not hold.

    The returned ``fence()`` takes no arguments, never awaits, and raises
    :class:`ProofInvalid` if the mutation epoch moved (``current_epoch()``
    differs from the proof's) or the grant expired since. Call it
    immediately before the terminal transition.
    """
    if proof is None:
        raise ProofInvalid("no verification proof: run verification before completing")
    if digest(proof.body()) != proof.proof_digest:
        raise ProofInvalid("the proof's digest does not match its content (altered proof)", details={"proof_digest": proof.proof_digest})
    if proof.version != PROOF_VERSION:
        raise ProofInvalid(f"proof version {proof.version} is not supported (want {PROOF_VERSION})")
    if not proof.accepted:
        raise ProofInvalid("verification was not accepted: a verifier call did not run to an exit status", details={"proof_digest": proof.proof_digest})
    if not proof.tests_passed:
        failed = [r.step for r in proof.receipts if not r.passed]
        raise ProofInvalid(
            f"verification did not pass (failed: {', '.join(failed) or 'no verifier ran'})",
            details={"proof_digest": proof.proof_digest, "failed": failed},
        )
    if proof.catalog_digest != catalog_digest:
        raise ProofInvalid(
            f"the proof was made under catalog {proof.catalog_digest}; the current catalog is {catalog_digest}",
            details={"proof_catalog_digest": proof.catalog_digest, "catalog_digest": catalog_digest},
        )
    if plan_digest is not None and proof.plan_digest != plan_digest:
        raise ProofInvalid(
            f"the proof is for plan {proof.plan_digest}, not the active plan {plan_digest}",
            details={"proof_plan_digest": proof.plan_digest, "plan_digest": plan_digest},
        )
    t = now or clock()
    if grant is None:
        raise ProofInvalid("no current grant authorizes completion")
    if grant.revoked() or grant.expired(t):
        raise ProofInvalid(f"grant {grant.grant_id} is {grant.status(t)}; completion needs a current grant", details={"grant_id": grant.grant_id})
    if grant.catalog_digest not in (None, catalog_digest):
        raise ProofInvalid(f"grant {grant.grant_id} is bound to another catalog", details={"grant_id": grant.grant_id})
    if proof.mutation_epoch != mutation_epoch:
        raise ProofInvalid(
            f"the workspace was written after verification (mutation epoch {proof.mutation_epoch} -> {mutation_epoch}); verify again",
            details={"proof_epoch": proof.mutation_epoch, "mutation_epoch": mutation_epoch},
        )
    if dict(fingerprints) != proof.fingerprints_after:
        d = diff_fingerprints(proof.fingerprints_after, fingerprints)
        shown = ", ".join(f"{k}: {', '.join(v[:5])}" for k, v in d.items() if v)
        raise ProofInvalid(
            f"workspace files changed since verification ({shown}); verify again",
            details={"diff": {k: v[:50] for k, v in d.items()}},
        )
    epoch, exp, gid = proof.mutation_epoch, grant.expires_at, grant.grant_id

    def fence() -> None:
        if current_epoch is not None:
            cur = current_epoch()
            if cur != epoch:
                raise ProofInvalid(
                    f"the workspace was written after the completion check (mutation epoch {epoch} -> {cur}); verify again",
                    details={"proof_epoch": epoch, "mutation_epoch": cur},
                )
        if clock() >= exp:
            raise ProofInvalid(f"grant {gid} expired during completion", details={"grant_id": gid})

    return fence


__all__ = [
    "Proof",
    "VerifierReceipt",
    "create_proof",
    "check_completion",
    "diff_fingerprints",
    "environment_digest",
    "environment_facts",
    "file_sha256",
    "fingerprint",
    "input_manifest",
    "subject_patterns",
]
