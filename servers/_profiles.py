"""Profiles: which tools (and resources/prompts) a server serves.

- ``tools``: the user's tools — from ``--module pkg.mod:attr`` (the attribute
  is a ``ToolRegistry``, an iterable of ``ToolDefinition``, or a zero-arg
  factory returning either) and from the ``openfunctions.tools`` entry-point
  group (same kinds) — plus the example tools (``example_tools.py``).
- ``artifacts``: ``of_artifact_read`` over ``<data-dir>/artifacts/``.
- ``work``: the ``of_work_*`` tools from ``openfunctions.work.build_work_profile``.
- ``agents``, ``memory``, ``rag``, ``gateway``: the upper layers. Each layer
  package exports a builder named in :data:`LAYERS`; see :func:`_layer_profile`
  for the contract it implements.
- ``all``: every part this data directory and configuration can serve.
- ``conformance``: the MCP conformance suite's fixtures
  (``openfunctions.servers.conformance.create_conformance_registry``).

Every profile's package ships in this distribution. A part that cannot be
served with this configuration (the work tools without a catalog, a layer
whose builder refuses) raises :class:`ProfileUnavailable` or another
``OpenFunctionsError`` naming what is missing; under ``all`` it is logged and
left out, never faked.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from openfunctions.core import OpenFunctionsError, ToolDefinition, ToolRegistry, import_spec

from ._example_tools import example_tools
from .errors import ProfileUnavailable, ToolLoadError

log = structlog.get_logger("openfunctions.servers.profiles")

from ._constants import PROFILES

ENTRY_POINT_GROUP = "openfunctions.tools"

Setup = Callable[[Any], None]
Closer = Callable[[], Awaitable[None]]


Starter = Callable[[], Awaitable[None]]


@dataclass
class Profile:
    name: str
    registry: ToolRegistry
    instructions: str | None = None
    setups: list[Setup] = field(default_factory=list)
    closers: list[Closer] = field(default_factory=list)
    # Run once, in order, after the server exists and before it serves (e.g.
    # connecting a gateway's upstreams, which needs an event loop).
    starters: list[Starter] = field(default_factory=list)

    def install(self, server: Any) -> None:
        """Register the profile's resources/prompts on ``server``."""
        for setup in self.setups:
            setup(server)

    async def start(self) -> None:
        for start in self.starters:
            await start()

    async def aclose(self) -> None:
        for close in reversed(self.closers):
            await close()


def _as_tools(obj: Any, where: str) -> ToolRegistry | list[ToolDefinition]:
    if callable(obj) and not isinstance(obj, (ToolRegistry, ToolDefinition)) and not hasattr(obj, "__iter__"):
        try:
            obj = obj()
        except TypeError as exc:
            raise ToolLoadError(f"{where}: the factory must take no arguments ({exc})") from None
    if isinstance(obj, ToolRegistry):
        return obj
    if isinstance(obj, ToolDefinition):
        return [obj]
    if getattr(obj, "openfunctions_kind", None) is not None:  # an agent or crew: the agents layer serves it
        return []
    if isinstance(obj, Iterable) and not isinstance(obj, (str, bytes, dict)):
        items = [t for t in obj if getattr(t, "openfunctions_kind", None) is None]
        bad = [type(t).__name__ for t in items if not isinstance(t, ToolDefinition)]
        if bad:
            raise ToolLoadError(f"{where}: expected ToolDefinition items, found {', '.join(sorted(set(bad)))}")
        return items
    raise ToolLoadError(
        f"{where}: expected a ToolRegistry, a list of tools, or a zero-arg factory returning one; got {type(obj).__name__}"
    )


def load_module_tools(spec: str) -> ToolRegistry | list[ToolDefinition]:
    """Load ``pkg.mod:attr`` (``attr`` defaults to ``registry``).

    A bare ``pkg.mod`` whose module has no ``registry`` serves the tools defined at its top level
    (``@tool`` functions, ``define_tool`` results), in definition order: what a newcomer who wrote
    ``mytools.py`` with two ``@tool`` functions expects ``--module mytools`` to do.
    """
    obj = import_spec(spec, default_attr="registry", error=ToolLoadError, missing_ok=":" not in spec)
    if obj is None:
        module = sys.modules[spec]
        found = list({id(v): v for v in vars(module).values() if isinstance(v, ToolDefinition)}.values())
        if not found:
            raise ToolLoadError(
                f"--module {spec!r}: module {spec!r} has no attribute 'registry' and defines no tools at its "
                f"top level: decorate functions with @tool, or name the attribute ({spec}:ATTR)")
        return found
    return _as_tools(obj, f"--module {spec}")


def load_entry_point_tools(*, labeled: bool = False) -> list[Any]:
    """The tools of every ``openfunctions.tools`` entry point; with ``labeled``, ``(source, part)`` pairs."""
    from openfunctions.plugins import load_group

    out: list[Any] = []
    for plugin, obj in load_group(ENTRY_POINT_GROUP):
        if plugin.error is not None:  # a broken plugin is reported (load_group logs it) and skipped, never fatal
            continue
        where = f"entry point {plugin.name} ({plugin.value})"
        try:
            tools = _as_tools(obj, where)
        except ToolLoadError as exc:
            log.warning("plugin_broken", group=ENTRY_POINT_GROUP, name=plugin.name,
                        distribution=plugin.distribution, reason=exc.message)
            continue
        out.append((where, tools) if labeled else tools)
    return out


def _merge(parts: list[Any]) -> ToolRegistry:
    """One registry from several parts. A single registry part is served as is (its policy and mode kept).

    A part may be ``(source, part)``: ``source`` (``--module x:y``, ``entry point z``) is named when two
    parts bring the same tool name.
    """
    labeled = [p if isinstance(p, tuple) else (None, p) for p in parts]
    registries = [p for _, p in labeled if isinstance(p, ToolRegistry)]
    if len(labeled) == 1 and registries:
        return registries[0]
    policies = {id(r.executor.policy): r for r in registries if r.executor.policy is not None}
    if len(policies) > 1:
        raise ToolLoadError("several tool sources bring their own policy; serve them in separate servers")
    base = next(iter(policies.values()), None) or (registries[0] if len(registries) == 1 else None)
    # The merged registry shares the executor of the registry part (the one with the policy): a tool
    # that calls back into its own registry (a workflow tool's steps) then runs in the server's
    # executor, under its journal and scheduler, not in a copy's.
    merged = ToolRegistry(executor=base.executor) if base is not None else ToolRegistry()
    for source, p in labeled:
        for t in p.list() if isinstance(p, ToolRegistry) else p:
            merged.register(t, source=source)
    return merged


def _tools_parts(modules: Iterable[str], files_root: str | Path | None, examples: bool) -> list[Any]:
    parts: list[Any] = []
    if examples:
        parts.append(("the example tools", example_tools(files_root=files_root)))
    for spec in modules:
        parts.append((f"--module {spec}", load_module_tools(spec)))
    parts.extend(load_entry_point_tools(labeled=True))
    return parts


def _artifacts_part(data_dir: Path) -> tuple[list[ToolDefinition], Closer, Setup, Starter]:
    """of_artifact_read over the data dir's store, or (``serve --database``) the database's (servers/_database.py)."""
    from openfunctions.artifacts import create_artifact_read_tool

    from ._database import ServedArtifacts

    store = ServedArtifacts(Path(data_dir) / "artifacts")
    return [create_artifact_read_tool(store)], store.close, store.install, store.start


def _work_profile(data_dir: Path, *, catalog: str | Path | None, principal: str | None, base: ToolRegistry | None,
                  database: str | None = None, lease_ttl: float = 30.0) -> Any:
    from openfunctions.work import build_work_profile

    backend = None
    if database:  # lease, attempts and grants in PostgreSQL, shared by replicas (servers/_work_database.py)
        from ._work_database import database_work_backend

        backend = database_work_backend(database, lease_ttl=lease_ttl)
    return build_work_profile(Path(data_dir), catalog_path=catalog, principal=principal, registry=base,
                              lease_ttl=lease_ttl, backend=backend)


def _conformance_profile() -> Profile:
    from .conformance import create_conformance_registry

    built = create_conformance_registry()
    if isinstance(built, ToolRegistry):
        return Profile("conformance", built)
    if isinstance(built, tuple):
        registry, *rest = built
        prof = Profile("conformance", registry)
        prof.setups.extend(r for r in rest if callable(r))
        return prof
    registry = built.registry
    prof = Profile("conformance", registry, instructions=getattr(built, "instructions", None))
    for attr in ("install", "setup"):
        fn = getattr(built, attr, None)
        if callable(fn):
            prof.setups.append(fn)
    return prof


# The upper layers: profile -> (package, builder). A builder is called as
# ``builder(data_dir=Path, registry=ToolRegistry | None, principal=str | None,
# modules=tuple[str, ...], store=str | None, upstreams=str | None)`` and
# returns an object with ``registry`` (a ToolRegistry), ``instructions``
# (str | None), ``async aclose()`` and optionally ``async start()`` and
# ``install(server)``. With ``registry`` given (the ``all`` profile) the layer
# registers its tools into that registry, so they share its executor (one
# scheduler, one journal), and returns it. A builder raises
# ``ProfileUnavailable`` (or any OpenFunctionsError) with a message naming what
# is missing; under ``all`` that part is then logged and left out.
LAYERS: dict[str, tuple[str, str]] = {
    "agents": ("openfunctions.agents", "build_agents_profile"),
    "memory": ("openfunctions.memory", "build_memory_profile"),
    "rag": ("openfunctions.rag", "build_rag_profile"),
    "gateway": ("openfunctions.providers", "build_gateway_profile"),
}


def _layer_builder(name: str) -> Callable[..., Any]:
    package, attr = LAYERS[name]
    builder: Callable[..., Any] = getattr(importlib.import_module(package), attr)
    return builder


def _layer_profile(name: str, options: dict[str, Any], registry: ToolRegistry | None) -> Profile:
    built = _layer_builder(name)(registry=registry, **options)
    prof = Profile(name, built.registry, getattr(built, "instructions", None), closers=[built.aclose])
    start = getattr(built, "start", None)
    if start is not None:
        prof.starters.append(start)
    install = getattr(built, "install", None)
    if install is not None:
        prof.setups.append(install)
    return prof


INSTRUCTIONS = {
    "tools": "Tools run through a validating, journaled executor; every result's _meta carries a receipt "
    "(dev.openfunctions/receipt) recording what ran.",
    "artifacts": "Read large outputs by artifact id with of_artifact_read (bounded chunks).",
    "all": "Tools, work and artifacts in one server; every result's _meta carries a receipt.",
}


def build_profile(name: str, **options: Any) -> Profile:
    """Build the named profile (options: see :func:`_build_profile`), then give every served tool that
    asks for it a place, a start and a close hook: a tool whose handler has ``on_server_place`` (called with
    the server's ``data_dir=`` and ``database=``, before anything starts) and ``on_server_start`` /
    ``on_server_close`` (async, no arguments; e.g. a durable workflow tool, whose runs resume on start)
    has them run with the profile's own starters and closers, once each."""
    prof = _build_profile(name, **options)
    for tool in prof.registry.list():
        place = getattr(tool.handler, "on_server_place", None)  # e.g. durable workflow runs built without a location
        if callable(place):
            place(data_dir=options["data_dir"], database=options.get("database"))
        start = getattr(tool.handler, "on_server_start", None)
        close = getattr(tool.handler, "on_server_close", None)
        if callable(start) and start not in prof.starters:
            prof.starters.append(start)
        if callable(close) and close not in prof.closers:
            prof.closers.insert(0, close)  # closers run in reverse: these run last, after the layers'
    return prof


def _build_profile(
    name: str,
    *,
    data_dir: Path,
    modules: Iterable[str] = (),
    files_root: str | Path | None = None,
    examples: bool = True,
    catalog: str | Path | None = None,
    principal: str | None = None,
    store: str | None = None,
    upstreams: str | Path | None = None,
    database: str | None = None,
    work_lease_ttl: float = 30.0,
    sampling_timeout: float | None = None,
    extensions: Any = None,
) -> Profile:
    """Build the named profile's registry and server setup.

    ``catalog``/``principal`` go to the work controller (``work`` and ``all``);
    ``store`` (a PostgreSQL URL, else the data directory) to memory and RAG;
    ``upstreams`` (an ``mcpServers`` JSON file) to the gateway.
    ``database`` (a PostgreSQL URL): the work controller's lease, attempts and
    grants there, shared by replicas (checked at start); ``work_lease_ttl`` its lease.
    ``sampling_timeout`` (seconds): the agents layer's deadline per sampling request.
    """
    layer_options: dict[str, Any] = dict(
        data_dir=Path(data_dir), principal=principal, modules=tuple(modules), store=store, upstreams=upstreams,
    )
    agent_options: dict[str, Any] = {} if sampling_timeout is None else {"sampling_timeout_s": sampling_timeout}

    def options_of(layer: str) -> dict[str, Any]:
        return {**layer_options, **agent_options} if layer == "agents" else layer_options

    if name not in PROFILES:
        raise ToolLoadError(f"unknown profile {name!r}: choose one of {', '.join(PROFILES)}")
    # --provider / --skills (servers/_extensions.py): more tool parts, prompts and instructions for tools and all
    if extensions is not None and extensions.requested and name not in ("tools", "all"):
        raise ToolLoadError(f"--provider and --skills apply to the tools and all profiles, not {name!r}")
    ext_parts = list(extensions.parts) if extensions is not None else []
    if name == "tools":
        prof = Profile("tools", _merge(_tools_parts(modules, files_root, examples) + ext_parts), INSTRUCTIONS["tools"])
        return _with_extensions(prof, extensions)
    if name == "artifacts":
        tools, close, setup, start = _artifacts_part(data_dir)
        return Profile("artifacts", ToolRegistry(tools), INSTRUCTIONS["artifacts"], closers=[close], setups=[setup],
                       starters=[start])
    if name == "work":
        wp = _work_profile(data_dir, catalog=catalog, principal=principal, base=None, database=database,
                           lease_ttl=work_lease_ttl)
        return Profile("work", wp.registry, wp.instructions, closers=[wp.aclose], starters=[wp.open] if database else [])
    if name == "conformance":
        return _conformance_profile()
    if name in LAYERS:
        return _layer_profile(name, options_of(name), None)
    # all: every part this configuration can serve; a part that cannot is logged, not faked.
    parts = _tools_parts(modules, files_root, examples) + ext_parts
    closers: list[Closer] = []
    tools, close, artifacts_setup, artifacts_start = _artifacts_part(data_dir)
    parts.append(tools)
    closers.append(close)
    base = _merge(parts)
    instructions = INSTRUCTIONS["all"]
    work_starters: list[Starter] = []  # with --database: connect the work backend and check its schema at start
    try:
        # The work tools must share the executor of the steps they run
        # (reservations, journal): build them into the same registry and
        # expose a projection of it.
        if any(base is (p[1] if isinstance(p, tuple) else p) for p in parts):  # never register into the caller's own registry
            ex = base.executor
            base = ToolRegistry(base.list(), policy=ex.policy, mode=ex.mode)
        shown = {t.name for t in base.list()}
        from openfunctions.work import resolve_catalog_path

        catalog_file = resolve_catalog_path(Path(data_dir), catalog)
        if not catalog_file.exists():
            raise ProfileUnavailable(f"no work catalog at {catalog_file} (pass --catalog)")
        wp = _work_profile(data_dir, catalog=catalog, principal=principal, base=base, database=database,
                           lease_ttl=work_lease_ttl)
        if database:
            work_starters.append(wp.open)
        shown |= {t.name for t in wp.registry.list()}
        base = base.project(names=shown)
        closers.append(wp.aclose)
        instructions = f"{instructions}\n\n{wp.instructions}"
    except ProfileUnavailable as exc:
        log.warning("profile_part_unavailable", part="work", reason=exc.message)
    setups: list[Setup] = [artifacts_setup]
    starters: list[Starter] = [artifacts_start, *work_starters]
    for layer in LAYERS:
        try:
            part = _layer_profile(layer, options_of(layer), base)
        except OpenFunctionsError as exc:
            log.warning("profile_part_unavailable", part=layer, reason=exc.message)
            continue
        base = part.registry
        closers.extend(part.closers)
        setups.extend(part.setups)
        starters.extend(part.starters)
        if part.instructions:
            instructions = f"{instructions}\n\n{part.instructions}"
    return _with_extensions(Profile("all", base, instructions, setups=setups, closers=closers, starters=starters),
                            extensions)


def _with_extensions(prof: Profile, extensions: Any) -> Profile:
    if extensions is None:
        return prof
    prof.setups.extend(extensions.setups)
    if extensions.instructions:
        prof.instructions = f"{prof.instructions}\n\n{extensions.instructions}" if prof.instructions else \
            extensions.instructions
    return prof


__all__ = ["PROFILES", "LAYERS", "Profile", "build_profile", "load_module_tools", "ENTRY_POINT_GROUP"]
