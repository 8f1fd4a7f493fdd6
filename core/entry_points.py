"""Entry points of installed packages, loaded one group at a time.

The plugins package (tools, context providers, prompts) and the skills
package both load their groups through :func:`load_group`, so it lives
below both of them: a broken entry point is reported the same way whoever
loads it (``plugin.error`` set, a warning naming the entry point and its
distribution), and it never stops a server from starting.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import structlog

log = structlog.get_logger("openfunctions.plugins")


@dataclass
class Plugin:
    """One entry point: where it came from and, once loaded, whether it loads."""

    group: str
    name: str
    value: str
    distribution: str | None
    version: str | None
    error: str | None = None

    @property
    def label(self) -> str:
        dist = f" from {self.distribution} {self.version}" if self.distribution else ""
        return f"entry point {self.name!r} ({self.value}) of {self.group}{dist}"

    def to_dict(self) -> dict[str, Any]:
        return {"group": self.group, "name": self.name, "value": self.value, "distribution": self.distribution,
                "version": self.version, "ok": self.error is None, "error": self.error}


def _plugin(ep: EntryPoint, group: str) -> Plugin:
    dist = getattr(ep, "dist", None)
    return Plugin(group, ep.name, ep.value, getattr(dist, "name", None), getattr(dist, "version", None))


def load_group(group: str) -> list[tuple[Plugin, Any]]:
    """Every entry point of ``group``, loaded: ``(plugin, object)``; a broken one has ``plugin.error`` and ``None``."""
    out: list[tuple[Plugin, Any]] = []
    seen: set[tuple[str, str]] = set()
    for ep in entry_points(group=group):
        if (ep.name, ep.value) in seen:  # the same distribution found twice on sys.path (an editable install)
            continue
        seen.add((ep.name, ep.value))
        plugin = _plugin(ep, group)
        try:
            obj = ep.load()
        except Exception as exc:
            plugin.error = f"{plugin.label} failed to load: {type(exc).__name__}: {exc}"
            log.warning("plugin_broken", group=group, name=ep.name, value=ep.value, distribution=plugin.distribution,
                        reason=plugin.error)
            out.append((plugin, None))
            continue
        out.append((plugin, obj))
    return out


__all__ = ["Plugin", "load_group"]
