"""Fixtures for the work tests: a workspace, a catalog file, grants, a controller.

Everything is real: the catalog is parsed from TOML, grants live in the
grants journal, the controller writes its attempt journal and lease under
``<data>/work``. Controller unit tests bind steps to small test tools
(``of_step.<name>``) whose behaviour they control; the crash and lifecycle
tests use the catalog's real step tools.
"""

from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from openfunctions.core import ToolDefinition, ToolRegistry
from openfunctions.work._authority import Authority
from openfunctions.work._catalog import Catalog
from openfunctions.work._controller import WorkController
from openfunctions.work._grants import GrantStore

PY = sys.executable


class WorkEnv:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.ws = root / "ws"
        self.ws.mkdir()
        self.data = root / "data"
        self.catalog_path = root / "catalog.toml"
        self.controllers: list[WorkController] = []

    @property
    def work_dir(self) -> Path:
        return self.data / "work"

    def write_catalog(self, body: str) -> Catalog:
        self.catalog_path.write_text('version = 1\nworkspace = "ws"\n' + body)
        return Catalog.load(self.catalog_path)

    def catalog(self) -> Catalog:
        return Catalog.load(self.catalog_path)

    def grants(self) -> GrantStore:
        return GrantStore.in_data_dir(self.data)

    async def grant(self, steps: Iterable[str], *, principal: str = "agent", paths: Iterable[str] = ("**",), ttl_s: float = 3600, catalog_digest: str | None = None) -> Any:
        return await self.grants().issue(
            principal=principal, steps=list(steps), paths=list(paths), ttl=_dt.timedelta(seconds=ttl_s),
            issuer="test", catalog_digest=catalog_digest,
        )

    async def open(self, tools: list[ToolDefinition], *, catalog: Catalog | None = None, **kw: Any) -> WorkController:
        catalog = catalog or self.catalog()
        registry = kw.pop("registry", None) or ToolRegistry(tools)
        ctl = await WorkController.open(
            self.work_dir, catalog=catalog, registry=registry,
            authority=kw.pop("authority", Authority(self.grants(), catalog)),
            catalog_loader=lambda: Catalog.load(self.catalog_path), **kw,
        )
        self.controllers.append(ctl)
        return ctl


async def run_step_dying_before_its_outcome(ctl: WorkController) -> None:
    """Run the next step; the controller "dies" after the step was dispatched (and ran) and
    before its outcome record is durable: the append of that record fails, then the controller closes."""
    real = ctl.custody.append

    async def append(rec: Any) -> Any:
        if rec[0] == "outcome":
            raise OSError("the process died here")
        return await real(rec)

    ctl.custody.append = append  # type: ignore[method-assign]
    with pytest.raises(OSError):
        await ctl.run_step(principal="agent")
    await ctl.close()


@pytest.fixture
async def env(tmp_path: Path):
    e = WorkEnv(tmp_path)
    yield e
    for c in e.controllers:
        await c.close()
