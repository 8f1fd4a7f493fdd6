"""The small interfaces the work controller takes (so a test or a host can pass its own).

- :class:`AuthorityProtocol` — the grant check at every effect
  (:class:`openfunctions.work.Authority` is the real one);
- :class:`ArtifactStoreProtocol` — where previews and reply projections go
  (:class:`openfunctions.artifacts.ArtifactStore`);
- custody (lease, fenced journal, renewal) is
  :class:`openfunctions.work._custody.CustodyProtocol`, re-exported here;
- where the durable state lives: :class:`LeaseBackend`, :class:`AttemptLog`,
  :class:`GrantBackend`, :class:`ResolutionBackend`, bundled as a :class:`WorkBackend`
  (:mod:`openfunctions.work._backend`; files by default, PostgreSQL from the
  store package), re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from openfunctions.artifacts import ArtifactRef

from ._backend import AttemptLog, GrantBackend, LeaseBackend, ResolutionBackend, WorkBackend
from ._custody import CustodyProtocol


class AuthorityProtocol(Protocol):
    grants: Any  # has load_sync() -> {grant_id: Grant} (the completion fence's synchronous re-read)

    async def check(self, *, principal: str | None, step: Any, paths: Sequence[str] = (), lease: Any = None, now: Any = None) -> Any: ...

    async def visible_grants(self, principal: str | None) -> list[Any]: ...


class ArtifactStoreProtocol(Protocol):
    async def put(self, data: Any, *, media_type: str, scope: str | None = None) -> ArtifactRef: ...


__all__ = ["AuthorityProtocol", "ArtifactStoreProtocol", "AttemptLog", "CustodyProtocol", "GrantBackend", "LeaseBackend", "ResolutionBackend", "WorkBackend"]
