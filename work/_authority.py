"""Authority: the check that runs at every effect, from the trusted context only.

``await authority.check(principal=..., step=..., paths=[...], lease=...)``
returns the :class:`~openfunctions.work._grants.Grant` that authorizes the
effect, or raises (in this order, so the error names the first thing that
was refused):

1. :class:`GrantDenied` — no principal, the step is not the current
   catalog's, no grant of this principal names the step, or every such
   grant is bound to another catalog digest;
2. :class:`GrantRevoked` / :class:`GrantExpired` — the covering grants exist
   but every one of them is revoked / expired;
3. :class:`PathOutsideGrant` — a path is absolute, has ``..``, resolves
   (symlinks included) outside the workspace, is outside the step's own
   catalog patterns (``write_file``/``read_file``), or matches no pattern of
   any active covering grant;
4. :class:`LeaseLost` (raised by the lease hook) — custody was lost.

Grants are re-read from the grants journal at every call (lock-free; see
:mod:`openfunctions.work._grants`), so a revocation by the CLI while the server
runs refuses the next effect.

Grant ``paths`` constrain a step's *path parameters* (``path`` of
``write_file``/``read_file``). A ``command`` step has no path parameter: the
grant authorizes it by step name, and its reach is what the operator wrote in
the catalog (argv, cwd, parameter patterns).

The lease hook (agreed with the controller): ``lease`` may be ``None`` (no
custody check), a zero-argument callable, or an object with a ``check()``
method; either is called (and awaited if it returns an awaitable) and must
raise :class:`LeaseLost` when custody is gone. An object with only a numeric
``expires_at`` (epoch seconds, ``time.time()`` clock) is checked against the
wall clock.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import time
from collections.abc import Sequence
from typing import Any

from ._catalog import Catalog, StepSpec
from ._errors import GrantDenied, GrantExpired, GrantRevoked, LeaseLost, PathOutsideGrant
from ._grants import Grant, GrantStore, utc_datetime
from ._paths import matching_pattern, resolve_in_workspace


class Authority:
    """Checks grants, catalog digest, paths and lease for one catalog."""

    def __init__(self, grant_store: GrantStore, catalog: Catalog) -> None:
        self.grants = grant_store
        self.catalog = catalog

    async def visible_grants(self, principal: str | None, now: _dt.datetime | None = None) -> list[Grant]:
        """The active grants of ``principal`` bound to this catalog (for ``of_work_catalog``)."""
        if not principal:
            return []
        t = now or utc_datetime()
        return [
            g for g in await self.grants.active_for(principal, t)
            if g.catalog_digest in (None, self.catalog.digest)
        ]

    async def check(
        self,
        *,
        principal: str | None,
        step: StepSpec,
        paths: Sequence[str] = (),
        lease: Any = None,
        now: _dt.datetime | None = None,
    ) -> Grant:
        t = now or utc_datetime()
        if not principal:
            raise GrantDenied(
                f"no principal in the trusted context: step {step.name!r} needs a grant issued to a principal; "
                "start the server with --principal NAME (the name grants are issued to)",
                details={"step": step.name},
            )
        if self.catalog.steps.get(step.name) != step:
            raise GrantDenied(
                f"step {step.name!r} does not belong to the current catalog ({self.catalog.digest})",
                details={"step": step.name, "catalog_digest": self.catalog.digest},
            )
        mine = await self.grants.for_principal(principal)
        covering = [g for g in mine if g.covers_step(step.name)]
        if not covering:
            granted = sorted({s for g in mine if g.active(t) for s in g.steps})
            raise GrantDenied(
                f"principal {principal!r} has no grant for step {step.name!r}"
                + (f" (active grants cover: {', '.join(granted)})" if granted else f" (no active grants in {self.grants.where})"),
                details={"principal": principal, "step": step.name, "granted_steps": granted},
            )
        bound = [g for g in covering if g.catalog_digest in (None, self.catalog.digest)]
        if not bound:
            raise GrantDenied(
                f"every grant of {principal!r} for step {step.name!r} is bound to another catalog "
                f"({', '.join(sorted({str(g.catalog_digest) for g in covering}))}); the current catalog is {self.catalog.digest}",
                details={"principal": principal, "step": step.name, "catalog_digest": self.catalog.digest},
            )
        live = [g for g in bound if not g.revoked()]
        if not live:
            g = max(bound, key=lambda g: g.revoked_at or t)
            raise GrantRevoked(
                f"grant {g.grant_id} for step {step.name!r} was revoked at {g.describe(t)['revoked_at']} by {g.revoked_by}",
                details={"principal": principal, "step": step.name, "grant_id": g.grant_id},
            )
        active = [g for g in live if not g.expired(t)]
        if not active:
            g = max(live, key=lambda g: g.expires_at)
            raise GrantExpired(
                f"grant {g.grant_id} for step {step.name!r} expired at {g.describe(t)['expires_at']}",
                details={"principal": principal, "step": step.name, "grant_id": g.grant_id},
            )
        if paths:
            active = self._check_paths(step, list(paths), active)
        await check_lease(lease)
        return max(active, key=lambda g: g.expires_at)

    def _check_paths(self, step: StepSpec, paths: list[str], grants: list[Grant]) -> list[Grant]:
        ok = list(grants)
        for p in paths:
            _real, rel = resolve_in_workspace(self.catalog.workspace, p)
            if step.paths and matching_pattern(rel, step.paths) is None:
                raise PathOutsideGrant(
                    f"path {p!r} (resolved: {rel!r}) is outside step {step.name!r}'s catalog patterns "
                    f"({', '.join(step.paths)})",
                    details={"path": p, "resolved": rel, "step": step.name, "patterns": list(step.paths)},
                )
            ok = [g for g in ok if matching_pattern(rel, g.paths) is not None]
            if not ok:
                pats = sorted({pat for g in grants for pat in g.paths})
                raise PathOutsideGrant(
                    f"path {p!r} (resolved: {rel!r}) matches no granted path pattern "
                    f"({', '.join(pats) if pats else 'the grant names no paths'})",
                    details={"path": p, "resolved": rel, "step": step.name, "granted_paths": pats},
                )
        return ok


async def check_lease(lease: Any) -> None:
    """Run the lease hook (see the module docstring); raise :class:`LeaseLost` if custody is gone."""
    if lease is None:
        return
    hook = lease if callable(lease) else getattr(lease, "check", None)
    if hook is not None and callable(hook):
        res = hook()
        if inspect.isawaitable(res):
            await res
        return
    exp = getattr(lease, "expires_at", None)
    if isinstance(exp, (int, float)) and time.time() >= exp:
        raise LeaseLost(f"the lease expired at {exp:.3f} (epoch seconds); no effect may run", details={"expires_at": exp})


__all__ = ["Authority", "check_lease"]
