"""Plugins: what installed packages add, through entry points.

Four entry-point groups; a package declares them in its ``pyproject.toml``::

    [project.entry-points."openfunctions.tools"]       # served by `serve` (tools and all profiles)
    mytools = "mypkg.tools:registry"                    # a ToolRegistry, a list of tools, or a factory

    [project.entry-points."openfunctions.providers"]   # `--provider NAME:ARG` loads NAME from here
    notes = "mypkg.notes:notes_provider"                # a ContextProvider, or factory(arg) -> one

    [project.entry-points."openfunctions.skills"]      # skills (openfunctions.skills)
    mypkg = "mypkg:SKILLS_DIR"                          # a directory, Skill(s), or a factory

    [project.entry-points."openfunctions.prompts"]     # MCP prompts
    review = "mypkg.prompts:review"                     # a Prompt, a list of them, or a factory

A plugin that fails to import, or whose object is not what its group takes,
is *broken*: :func:`list_plugins` reports it (``error``) and every loader
skips it with a warning naming the entry point and its distribution; it
never stops a server from starting. ``openfunctions-mcp plugins list`` shows
each plugin's group, name, target, distribution and version, and status.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from openfunctions.core import OpenFunctionsError, import_spec
from openfunctions.core.entry_points import Plugin, load_group

log = structlog.get_logger("openfunctions.plugins")

_ATTR_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TOOLS_GROUP = "openfunctions.tools"
PROVIDERS_GROUP = "openfunctions.providers"
SKILLS_GROUP = "openfunctions.skills"
PROMPTS_GROUP = "openfunctions.prompts"
GROUPS: dict[str, str] = {"tools": TOOLS_GROUP, "providers": PROVIDERS_GROUP, "skills": SKILLS_GROUP,
                          "prompts": PROMPTS_GROUP}


class PluginError(OpenFunctionsError):
    """A plugin (or a ``--provider`` spec) that cannot be used; the message names it."""

    code = "plugin_error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code:
            self.code = code


def list_plugins(groups: Iterable[str] | None = None) -> list[Plugin]:
    """The installed plugins of ``groups`` (default: all four), each loaded once to tell a broken one."""
    rows: list[Plugin] = []
    for group in groups or GROUPS.values():
        for plugin, obj in load_group(group):
            if plugin.error is None:
                problem = _check_kind(group, obj)
                if problem:
                    plugin.error = f"{plugin.label}: {problem}"
            rows.append(plugin)
    return rows


def _check_kind(group: str, obj: Any) -> str | None:
    """What is wrong with ``obj`` for ``group`` (a cheap check: factories are not called)."""
    if callable(obj) or obj is None:
        return None if obj is not None else "the entry point's object is None"
    if group == PROVIDERS_GROUP:
        from openfunctions.providers import ContextProvider

        return None if isinstance(obj, ContextProvider) else f"expected a ContextProvider or a factory, got {type(obj).__name__}"
    if group == TOOLS_GROUP:
        from openfunctions.core import ToolDefinition, ToolRegistry

        ok = isinstance(obj, (ToolRegistry, ToolDefinition)) or (
            isinstance(obj, (list, tuple)) and all(isinstance(t, ToolDefinition) for t in obj))
        return None if ok else f"expected a ToolRegistry, a list of tools or a factory, got {type(obj).__name__}"
    if group == SKILLS_GROUP:
        import os

        from openfunctions.skills import Skill

        ok = isinstance(obj, (str, os.PathLike, Skill)) or (
            isinstance(obj, (list, tuple)) and all(isinstance(i, (str, os.PathLike, Skill)) for i in obj))
        return None if ok else f"expected a directory, Skill objects or a factory, got {type(obj).__name__}"
    if group == PROMPTS_GROUP:
        items = obj if isinstance(obj, (list, tuple)) else [obj]
        bad = [type(i).__name__ for i in items if not isinstance(i, Prompt)]
        return f"expected Prompt objects, got {', '.join(bad)}" if bad else None
    return None


# -- providers by short name ------------------------------------------------


def resolve_provider(spec: str) -> Any:
    """The :class:`~openfunctions.providers.ContextProvider` a ``--provider`` spec names.

    ``NAME:ARG`` or ``NAME``: the ``openfunctions.providers`` entry point
    ``NAME``; its object is a provider, or a factory called with ``ARG`` (a
    path, for the reference providers: ``vault:/notes``). Otherwise
    ``pkg.module:attr`` (a dotted module, or an attribute name after the
    colon): that object, a provider or a zero-argument factory.
    """
    from openfunctions.providers import ContextProvider

    if not isinstance(spec, str) or not spec.strip():
        raise PluginError(f"--provider {spec!r}: give NAME:ARG (e.g. vault:/path/to/notes) or pkg.module:attr",
                          code="provider_spec_invalid")
    name, _, arg = spec.partition(":")
    found = {p.name: (p, obj) for p, obj in load_group(PROVIDERS_GROUP)}
    if name in found:
        plugin, obj = found[name]
        if plugin.error:
            raise PluginError(plugin.error, code="plugin_broken")
        where = f"--provider {spec!r} ({plugin.label})"
    elif "." in name or _ATTR_RE.match(arg):  # pkg.module:attr, or module:attr for a module in the current dir
        obj = import_spec(spec, default_attr="provider", what="--provider", error=PluginError, from_cwd=True)
        where, arg = f"--provider {spec!r}", ""
    else:
        known = ", ".join(sorted(found)) or "none installed"
        raise PluginError(f"--provider {spec!r}: no provider named {name!r} (installed: {known}); or give "
                          "pkg.module:attr", code="provider_unknown")
    if isinstance(obj, ContextProvider):
        if arg:
            raise PluginError(f"{where}: this provider takes no argument (remove ':{arg}')", code="provider_spec_invalid")
        return obj
    if not callable(obj):
        raise PluginError(f"{where}: expected a ContextProvider or a factory, got {type(obj).__name__}",
                          code="plugin_broken")
    try:
        provider = obj(arg) if arg else obj()
    except TypeError as exc:
        raise PluginError(f"{where}: {exc} (does it need an argument, as in {name}:ARG?)",
                          code="provider_spec_invalid") from None
    except OpenFunctionsError as exc:
        raise PluginError(f"{where}: {exc.message}", code="provider_spec_invalid") from None
    if not isinstance(provider, ContextProvider):
        raise PluginError(f"{where}: the factory returned {type(provider).__name__}, not a ContextProvider",
                          code="plugin_broken")
    return provider


# -- prompts ------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    """An MCP prompt a plugin contributes: ``text`` with ``{argument}`` placeholders, or ``render(args) -> str``."""

    name: str
    description: str
    text: str | None = None
    arguments: tuple[dict[str, Any], ...] = ()
    render: Callable[[dict[str, str]], Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if (self.text is None) == (self.render is None):
            raise PluginError(f"prompt {self.name!r}: give text or render, not both or neither", code="prompt_invalid")
        if self.text is not None:
            declared = {a.get("name") for a in self.arguments}
            used = {f for _, f, _, _ in string.Formatter().parse(self.text) if f}
            if used - declared:
                raise PluginError(f"prompt {self.name!r}: placeholders {sorted(used - declared)} are not declared "
                                  "arguments", code="prompt_invalid")

    def renderer(self) -> Callable[[dict[str, str]], Any]:
        if self.render is not None:
            return self.render
        text = self.text or ""
        names = [a["name"] for a in self.arguments]
        return lambda args: text.format(**{n: args.get(n, "") for n in names})


def load_prompts() -> list[Prompt]:
    """The prompts of the ``openfunctions.prompts`` entry points; a broken one is logged and skipped."""
    out: list[Prompt] = []
    for plugin, obj in load_group(PROMPTS_GROUP):
        if plugin.error:
            continue
        try:
            if callable(obj) and not isinstance(obj, Prompt):
                obj = obj()
            items = list(obj) if isinstance(obj, (list, tuple)) else [obj]
            bad = [type(i).__name__ for i in items if not isinstance(i, Prompt)]
            if bad:
                raise PluginError(f"expected Prompt objects, got {', '.join(bad)}")
        except Exception as exc:
            log.warning("plugin_broken", group=PROMPTS_GROUP, name=plugin.name, distribution=plugin.distribution,
                        reason=f"{type(exc).__name__}: {exc}")
            continue
        out.extend(items)
    return out


def install_prompts(server: Any, prompts: Iterable[Prompt]) -> None:
    for p in prompts:
        server.add_prompt(p.name, p.description, list(p.arguments), p.renderer())


__all__ = [
    "GROUPS", "PROMPTS_GROUP", "PROVIDERS_GROUP", "SKILLS_GROUP", "TOOLS_GROUP", "Plugin", "PluginError", "Prompt",
    "install_prompts", "list_plugins", "load_group", "load_prompts", "resolve_provider",
]
