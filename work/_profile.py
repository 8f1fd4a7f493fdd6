"""The work profile: what ``openfunctions-mcp serve --profile work`` serves.

:func:`build_work_profile` assembles, for one data directory and catalog:

- the artifact store ``<data-dir>/work/artifacts`` (64 MiB quota), or the
  backend's shared one (``WorkBackend.artifacts``: ``serve --database`` keeps
  them in PostgreSQL, so an id minted on one replica reads on any other);
- an internal registry holding the catalog's step tools (``of_step.*``),
  its oracles (``of_oracle.*``) and the ``of_work_*`` tools — one executor,
  so a step run from ``of_work_run_step`` inherits the handler's exclusive
  reservation;
- the :class:`WorkController` on ``<data-dir>/work`` (lease, attempt
  journal, grants);
- the registry the server exposes: a *projection* of the internal one
  showing only the ``of_work_*`` tools (agents reach steps only through the
  controller, which checks authority first).

Without a catalog file it still builds (so ``serve --profile all`` keeps its
other parts): the ``of_work_*`` tools are served and every call refuses with
``catalog_invalid`` naming where the catalog is expected; pass
``require_catalog=True`` to raise :class:`CatalogInvalid` instead.

It is synchronous, so a host can build it before its event loop serves
anything; the controller opens (lease, recovery, renewal) on the first tool
call, or when the host awaits :meth:`WorkProfile.open`. Always
``await profile.aclose()``.

The catalog is ``catalog_path``, else ``$OPENFUNCTIONS_WORK_CATALOG``, else
``<data-dir>/work/catalog.toml``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from openfunctions.core import ToolRegistry

from ._controller import WorkController
from ._errors import CatalogInvalid
from ._tools import REPLY_BUDGET, WORK_TOOL_NAMES, create_work_tools

log = structlog.get_logger("openfunctions.work._profile")

CATALOG_ENV = "OPENFUNCTIONS_WORK_CATALOG"
DEFAULT_QUOTA = 64 * 1024 * 1024

INSTRUCTIONS = (
    "Bounded, durable work in the operator's workspace. Call of_work_catalog to see the steps you may use, "
    "of_work_preview with a plan ([{step, params}]) to see exactly what would run, of_work_start with the "
    "previewId, then of_work_run_step until every step ran, of_work_verify, and of_work_complete. "
    "If of_work_status says 'blocked' with an unknown operation, call of_work_reconcile: uncertain steps are "
    "never re-run blindly. Large outputs come as artifact ids: read them with of_work_artifact_read."
)


@dataclass
class WorkProfile:
    registry: ToolRegistry
    controller: WorkController | None
    store: Any
    catalog: Any
    instructions: str = INSTRUCTIONS
    internal: ToolRegistry | None = field(default=None, repr=False)

    async def open(self) -> None:
        """Open the controller now (lease, recovery) instead of on the first call."""
        if self.controller is not None:
            await self.controller.ensure_open()

    async def aclose(self) -> None:
        if self.controller is not None:
            await self.controller.close()  # closes the backend, and with it a backend's shared artifact store
        close = getattr(self.store, "close", None)
        if callable(close):
            close()


def resolve_catalog_path(data_dir: Path, catalog_path: str | os.PathLike[str] | None) -> Path:
    if catalog_path is not None:
        return Path(catalog_path)
    env = os.environ.get(CATALOG_ENV)
    if env:
        return Path(env)
    return Path(data_dir) / "work" / "catalog.toml"


def build_work_profile(
    data_dir: str | os.PathLike[str],
    *,
    catalog_path: str | os.PathLike[str] | None = None,
    principal: str | None = None,
    lease_ttl: float = 30.0,
    quota_bytes: int = DEFAULT_QUOTA,
    budget: int = REPLY_BUDGET,
    registry: ToolRegistry | None = None,
    require_catalog: bool = False,
    backend: Any = None,
) -> WorkProfile:
    """Build the work profile for ``data_dir`` (see the module docstring).

    ``principal`` is the trusted default principal for calls whose context
    carries none (the server's ``--principal``); tool arguments never set it.
    ``registry`` lets a host share an executor (its policy, journal sink).
    ``backend`` (a :class:`~openfunctions.work._backend.WorkBackend`) keeps the
    lease, attempts and grants (and, with ``backend.artifacts``, the work
    artifacts) elsewhere than ``<data-dir>/work`` (``serve --database`` passes
    PostgreSQL's, built by the store package); the profile then owns it and
    closes it with the controller.
    """
    from openfunctions.artifacts import ArtifactStore

    from ._authority import Authority
    from ._catalog import Catalog
    from ._grants import GrantStore
    from ._steps import create_step_tools

    data_dir = Path(data_dir)
    path = resolve_catalog_path(data_dir, catalog_path)
    if not path.exists():
        missing = CatalogInvalid(
            f"no work catalog at {str(path)!r}: write one (see docs/WORK.md), then set ${CATALOG_ENV} "
            "to its path or place it at <data-dir>/work/catalog.toml, and restart the server",
            details={"file": str(path)},
        )
        if require_catalog:
            raise missing
        log.warning("work_catalog_missing", file=str(path))
        internal = registry if registry is not None else ToolRegistry()
        for t in create_work_tools(None, principal=principal, unavailable=missing):
            internal.register(t)
        return WorkProfile(registry=internal.project(names=WORK_TOOL_NAMES), controller=None, store=None, catalog=None, internal=internal)
    catalog = Catalog.load(path)
    work_dir = data_dir / "work"
    shared = backend.artifacts if backend is not None else None
    store = shared if shared is not None else ArtifactStore(work_dir / "artifacts", quota_bytes=quota_bytes)
    internal = registry if registry is not None else ToolRegistry()
    for t in create_step_tools(catalog, store=store, tools=internal):  # a ``tool`` step binds a tool of ``registry``
        internal.register(t)
    controller = WorkController(
        work_dir,
        catalog=catalog,
        registry=internal,
        authority=Authority(backend.grants if backend is not None else GrantStore.in_data_dir(data_dir), catalog),
        artifacts=store,
        catalog_loader=lambda: Catalog.load(path),
        lease_ttl=lease_ttl,
        backend=backend,
    )
    for t in create_work_tools(controller, store=store, budget=budget, principal=principal):
        internal.register(t)
    exposed = internal.project(names=WORK_TOOL_NAMES)
    return WorkProfile(registry=exposed, controller=controller, store=store, catalog=catalog, internal=internal)


__all__ = ["WorkProfile", "build_work_profile", "resolve_catalog_path", "CATALOG_ENV", "INSTRUCTIONS"]
