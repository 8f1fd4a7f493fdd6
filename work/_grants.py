"""Grants: the operator's durable, revocable authority for a principal to run catalog steps.

Grants are issued by the operator (``openfunctions-mcp grant issue ...``),
never by tool arguments. They live in one journal file
(:class:`openfunctions.core.journal.JournalLog`), by default
``<data-dir>/work/grants.journal``.

Who writes, who reads
---------------------
The CLI (the issuer) opens the journal writer briefly (taking its flock),
appends one record, and closes it. The server never holds the writer: it
reads the file lock-free with ``read_records`` at every check (re-parsing
only when the file's size/mtime/inode changed), so grants issued or revoked
while the server runs take effect at the server's next check.

Record format (journal records, ``data`` version 1)
---------------------------------------------------
``grant.issued``::

    {"v": 1, "grant": {
        "grant_id": "grant_<random>",       # opaque, never reused
        "issuer": "alice",                 # who issued it (operator name)
        "principal": "agent",              # the trusted-context principal it authorizes
        "steps": ["test", "write_src"],    # catalog step names (no wildcards)
        "paths": ["src/**"],               # glob patterns for path parameters (may be empty)
        "issued_at": "2026-01-01T00:00:00.000000Z",
        "expires_at": "2026-01-01T08:00:00.000000Z",
        "catalog_digest": "sha256:..." | null   # optional binding to one catalog
    }}

``grant.revoked``::

    {"v": 1, "grant_id": "grant_...", "revoked_at": "<ISO-8601 UTC>", "revoked_by": "alice"}

A grant's state is the fold of its records (:func:`apply`): issued, then
possibly revoked (the first revocation wins; revoking again is a no-op). A
record that does not match this format makes the whole store unreadable
(:class:`GrantStoreCorrupt`): failing closed denies every check rather than
silently dropping a revocation. The journal is the core record stream
:data:`GRANTS` (``openfunctions.core.records``), whose policy for a record
type this version does not know is ``REFUSE`` for the same reason: a newer
version's record may narrow or end a grant, and folding around it would
grant more than the operator did. (Versions before the record stream skipped
such a record.) The issuer's writer and the lock-free readers fold through it.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from openfunctions.core import new_id
from openfunctions.core.records import FileRecordLog, RecordStream, StreamRecord, UnknownRecords, replay

from ._catalog import STEP_NAME_RE
from ._errors import GrantNotFound, GrantStoreCorrupt
from ._paths import check_pattern

GRANTS_FORMAT_VERSION = 1
GRANTS_FILE = "grants.journal"
JOURNAL_KIND = "grants"
ISSUED = "grant.issued"
REVOKED = "grant.revoked"
_LOCK_WAIT_S = 10.0


def _utc(t: _dt.datetime) -> _dt.datetime:
    if t.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return t.astimezone(_dt.UTC)


def _iso(t: _dt.datetime) -> str:
    return _utc(t).isoformat(timespec="microseconds").replace("+00:00", "Z")


def utc_datetime() -> _dt.datetime:
    return _dt.datetime.now(_dt.UTC)


class Grant(BaseModel):
    """One grant, with its revocation folded in. Immutable."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    grant_id: str = Field(min_length=1, max_length=128)
    issuer: str = Field(min_length=1, max_length=256)
    principal: str = Field(min_length=1, max_length=256)
    steps: tuple[str, ...]
    paths: tuple[str, ...] = ()
    issued_at: _dt.datetime
    expires_at: _dt.datetime
    catalog_digest: str | None = None
    revoked_at: _dt.datetime | None = None
    revoked_by: str | None = None

    @field_validator("issued_at", "expires_at", "revoked_at")
    @classmethod
    def _aware(cls, v: _dt.datetime | None) -> _dt.datetime | None:
        return None if v is None else _utc(v)

    @field_validator("steps")
    @classmethod
    def _steps(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v or not all(isinstance(s, str) and s for s in v):
            raise ValueError("a grant names at least one step")
        bad = [s for s in v if not STEP_NAME_RE.match(s)]
        if bad:
            raise ValueError(f"{', '.join(map(repr, bad))} cannot be a step name (^[a-z][a-z0-9_-]{{0,63}}$; no wildcards)")
        return v

    @field_validator("paths")
    @classmethod
    def _paths(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for p in v:
            why = check_pattern(p)
            if why:
                raise ValueError(why)
        return v

    @classmethod
    def new(
        cls, *, principal: str, steps: Sequence[str], paths: Sequence[str] = (), ttl: _dt.timedelta | None = None,
        expires_at: _dt.datetime | None = None, issuer: str | None = None, catalog_digest: str | None = None,
        now: _dt.datetime | None = None,
    ) -> Grant:
        """A new grant (fresh id) checked field by field; every backend's ``issue`` builds its grant here.

        Give ``ttl`` or ``expires_at``. Bad input raises ``ValueError`` naming the field.
        """
        t = _utc(now) if now else utc_datetime()
        if (ttl is None) == (expires_at is None):
            raise ValueError("give exactly one of ttl= or expires_at=")
        exp = t + ttl if ttl is not None else _utc(expires_at)  # type: ignore[arg-type]
        if exp <= t:
            raise ValueError("a grant must expire in the future")
        try:
            return cls(
                grant_id=new_id("grant"),
                issuer=issuer or _default_issuer(),
                principal=principal,
                steps=tuple(dict.fromkeys(steps)),
                paths=tuple(dict.fromkeys(paths)),
                issued_at=t,
                expires_at=exp,
                catalog_digest=catalog_digest,
            )
        except ValidationError as exc:
            msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"invalid grant: {msg}") from None

    def revoked_copy(self, at: _dt.datetime | str, by: str | None) -> Grant:
        """This grant with its (first) revocation folded in (``at``: a datetime or the ISO text a record holds)."""
        when = _dt.datetime.fromisoformat(at.replace("Z", "+00:00")) if isinstance(at, str) else at
        return self.model_copy(update={"revoked_at": _utc(when), "revoked_by": str(by or "unknown")})

    def expired(self, now: _dt.datetime) -> bool:
        return _utc(now) >= self.expires_at

    def revoked(self, now: _dt.datetime | None = None) -> bool:
        # A revocation counts from the moment it is recorded, whatever ``now``
        # a caller passes: an operator's revoke is never postponed.
        return self.revoked_at is not None

    def active(self, now: _dt.datetime) -> bool:
        return not self.revoked() and not self.expired(now)

    def status(self, now: _dt.datetime) -> str:
        if self.revoked(now):
            return "revoked"
        if self.expired(now):
            return "expired"
        return "active"

    def covers_step(self, step: str) -> bool:
        return step in self.steps

    def to_record(self) -> dict[str, Any]:
        return {
            "grant_id": self.grant_id,
            "issuer": self.issuer,
            "principal": self.principal,
            "steps": list(self.steps),
            "paths": list(self.paths),
            "issued_at": _iso(self.issued_at),
            "expires_at": _iso(self.expires_at),
            "catalog_digest": self.catalog_digest,
        }

    def describe(self, now: _dt.datetime | None = None) -> dict[str, Any]:
        """JSON view (for ``grant list --json`` and ``of_work_catalog``)."""
        d = self.to_record()
        d["revoked_at"] = _iso(self.revoked_at) if self.revoked_at else None
        d["revoked_by"] = self.revoked_by
        d["status"] = self.status(now or utc_datetime())
        return d


def parse_ttl(text: str) -> _dt.timedelta:
    """``90s``, ``30m``, ``8h``, ``2d``, ``1h30m`` -> timedelta (positive, at most 366 days)."""
    import re

    if not isinstance(text, str) or not re.fullmatch(r"(?:\d+[smhd])+", text.strip()):
        raise ValueError(f"TTL {text!r} is not like 90s, 30m, 8h, 2d or 1h30m")
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    secs = sum(int(n) * units[u] for n, u in re.findall(r"(\d+)([smhd])", text.strip()))
    if not 0 < secs <= 366 * 86400:
        raise ValueError(f"TTL {text!r} must be more than 0 and at most 366 days")
    return _dt.timedelta(seconds=secs)


def apply(grants: dict[str, Grant], rec: StreamRecord, parsed: dict[tuple[int, str], Grant] | None = None) -> None:
    """Fold one grants record into ``grants`` (grant id -> grant). ``parsed``: a cache of validated
    ``grant.issued`` records by (seq, grant id); journal records are immutable and checksummed, so a re-read
    after an append validates only the new ones. Raises ``KeyError``/``TypeError``/``ValueError``."""
    data = rec.data
    if not isinstance(data, dict) or data.get("v") != GRANTS_FORMAT_VERSION:
        raise ValueError(f"data.v must be {GRANTS_FORMAT_VERSION}")
    if rec.type == ISSUED:
        key = (rec.seq, str(data["grant"].get("grant_id")))
        g = (parsed or {}).get(key) or Grant.model_validate(data["grant"])
        if parsed is not None:
            parsed[key] = g
        if g.grant_id in grants:
            raise ValueError(f"grant {g.grant_id} issued twice")
        grants[g.grant_id] = g
    else:  # REVOKED
        gid = data["grant_id"]
        revoked = grants.get(gid)
        if revoked is None:
            raise ValueError(f"revokes unknown grant {gid!r}")
        if revoked.revoked_at is None:
            grants[gid] = revoked.revoked_copy(data["revoked_at"], data.get("revoked_by"))


def _corrupt(where: Path | str, rec: StreamRecord, exc: Exception) -> GrantStoreCorrupt:
    # pydantic's ValidationError is a ValueError: it arrives here too
    return GrantStoreCorrupt(
        f"grants journal {where} record seq {rec.seq} ({rec.type}) is not a valid grant record: {exc}; "
        "refusing every grant until the operator repairs it",
        details={"path": str(where), "seq": rec.seq},
    )


def grants_stream(parsed: dict[tuple[int, str], Grant] | None = None) -> RecordStream[dict[str, Grant]]:
    """The grants stream, folding with ``parsed`` as :func:`apply`'s cache (one per :class:`GrantStore`)."""
    return RecordStream(
        "grants", kind=JOURNAL_KIND, types={ISSUED, REVOKED}, new_state=dict,
        apply=lambda grants, rec: apply(grants, rec, parsed), unknown=UnknownRecords.REFUSE, malformed=_corrupt)


#: The grants journal as a core record stream (no cache; a :class:`GrantStore` folds with its own).
GRANTS = grants_stream()


class GrantStore:
    """Durable grants in one journal file. Issue/revoke write; everything else reads lock-free."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.where = str(self.path)  # what refusals name as the place grants were read from (GrantBackend)
        self._cache_key: tuple[int, int, int] | None = None
        self._cache: dict[str, Grant] = {}
        # Parsed grant.issued records by (seq, grant_id): journal records are
        # immutable and checksummed, so a re-read after an append validates
        # only the new ones.
        self._parsed: dict[tuple[int, str], Grant] = {}
        self._stream = grants_stream(self._parsed)

    @classmethod
    def in_data_dir(cls, data_dir: str | os.PathLike[str]) -> GrantStore:
        return cls(Path(data_dir) / "work" / GRANTS_FILE)

    # -- reading (lock-free) ----------------------------------------------

    async def _load(self) -> dict[str, Grant]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._cache_key, self._cache = None, {}
            return {}
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key == self._cache_key:
            return self._cache
        # the read blocks: run it off the event loop
        grants = await anyio.to_thread.run_sync(self._replay)
        self._cache_key, self._cache = key, grants
        return grants

    def _replay(self) -> dict[str, Grant]:
        return replay(self._stream, self.path).state

    def load_sync(self) -> dict[str, Grant]:
        """Every grant by id, read now without awaiting (a completion fence's last check; cached by the file's stat)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return {}
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        if key != self._cache_key:
            grants = self._replay()
            self._cache_key, self._cache = key, grants
        return self._cache

    async def list(self) -> list[Grant]:
        """Every grant ever issued (revoked and expired included), in issue order."""
        return list((await self._load()).values())

    async def get(self, grant_id: str) -> Grant:
        g = (await self._load()).get(grant_id)
        if g is None:
            raise GrantNotFound(f"no grant {grant_id!r} in {self.path}", details={"grant_id": grant_id})
        return g

    async def for_principal(self, principal: str) -> builtins.list[Grant]:
        """Every grant naming ``principal`` (whatever its status): authority explains refusals from these."""
        return [g for g in (await self._load()).values() if g.principal == principal]

    async def active_for(self, principal: str, now: _dt.datetime | None = None) -> builtins.list[Grant]:
        """The grants of ``principal`` neither expired nor revoked at ``now``."""
        t = now or utc_datetime()
        return [g for g in await self.for_principal(principal) if g.active(t)]

    # -- writing (the issuer; opens the writer briefly) ---------------------

    async def _open_writer(self) -> FileRecordLog[dict[str, Grant]]:
        """The stream, locked and folded (so an issue or revocation sees every grant as of now)."""
        from openfunctions.core.journal import JournalLocked

        # Another CLI invocation may hold the flock for a moment: wait briefly.
        with anyio.move_on_after(_LOCK_WAIT_S):
            while True:
                try:
                    return await FileRecordLog.open(self._stream, self.path)
                except JournalLocked:
                    await anyio.sleep(0.05)
        return await FileRecordLog.open(self._stream, self.path)

    async def issue(
        self,
        *,
        principal: str,
        steps: Sequence[str],
        paths: Sequence[str] = (),
        ttl: _dt.timedelta | None = None,
        expires_at: _dt.datetime | None = None,
        issuer: str | None = None,
        catalog_digest: str | None = None,
        now: _dt.datetime | None = None,
    ) -> Grant:
        """Issue a grant (durable once this returns). Give ``ttl`` or ``expires_at``."""
        g = Grant.new(principal=principal, steps=steps, paths=paths, ttl=ttl, expires_at=expires_at, issuer=issuer,
                      catalog_digest=catalog_digest, now=now)
        log = await self._open_writer()
        try:
            await log.append(ISSUED, {"v": GRANTS_FORMAT_VERSION, "grant": g.to_record()})
        finally:
            await log.close()
        return g

    async def revoke(self, grant_id: str, *, by: str | None = None, now: _dt.datetime | None = None) -> Grant:
        """Revoke a grant (durable once this returns). Revoking a revoked grant returns it unchanged."""
        t = _utc(now) if now else utc_datetime()
        log = await self._open_writer()
        try:
            # The fold under the writer's lock, so two revocations cannot race.
            g = log.state.get(grant_id)
            if g is None:
                raise GrantNotFound(f"no grant {grant_id!r} in {self.path}", details={"grant_id": grant_id})
            if g.revoked_at is not None:
                return g
            who = by or _default_issuer()
            await log.append(REVOKED, {"v": GRANTS_FORMAT_VERSION, "grant_id": grant_id, "revoked_at": _iso(t), "revoked_by": who})
            return log.state[grant_id]  # the live fold of the revocation
        finally:
            await log.close()


def _default_issuer() -> str:
    try:
        import getpass

        return getpass.getuser()
    except Exception:  # no passwd entry (containers)
        return f"uid:{os.getuid()}"


__all__ = ["GRANTS", "Grant", "GrantStore", "apply", "grants_stream", "parse_ttl", "GRANTS_FILE"]
