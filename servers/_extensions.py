"""What ``serve --provider SPEC`` and ``--skills DIR`` add to the tools and all profiles, and the plugins' skills and prompts.

Opened before the profile is built (connecting a provider needs the event
loop): each ``--provider`` spec is resolved
(:func:`openfunctions.plugins.resolve_provider`: ``vault:/notes``,
``pkg.mod:attr``), connected, and its tools (tagged ``context:<id>``) become
one more tool part; the providers' ``build_context()`` blocks go into the
server's instructions. Skills (each ``--skills DIR`` and the
``openfunctions.skills`` plugins) add ``skill_list``/``skill_load`` and an MCP
prompt per skill; ``openfunctions.prompts`` plugins add their prompts. A
provider that fails to resolve or connect stops the start (it was asked for
by name); a broken plugin or a bad skill file is logged and skipped.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog

from openfunctions.core import ToolDefinition, ToolRegistry

log = structlog.get_logger("openfunctions.servers.extensions")


@dataclass
class Extensions:
    parts: list[tuple[str, list[ToolDefinition]]] = field(default_factory=list)
    setups: list[Callable[[Any], None]] = field(default_factory=list)
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    instructions: str | None = None
    #: what the user named on the command line (``--provider``, ``--skills``): other profiles refuse it
    requested: bool = False

    async def aclose(self) -> None:
        for close in reversed(self.closers):
            with anyio.CancelScope(shield=True):
                await close()


async def open_extensions(providers: Sequence[str] = (), skills: Sequence[str] = (), *,
                          plugins: bool = True) -> Extensions:
    from openfunctions.plugins import install_prompts, load_prompts, resolve_provider
    from openfunctions.providers import connect_provider, context_prompt
    from openfunctions.skills import install_skill_prompts, load_skills, skill_tools, skills_prompt

    ext = Extensions(requested=bool(providers or skills))
    connected: list[Any] = []
    blocks: list[str] = []
    try:
        for spec in providers:
            provider = resolve_provider(spec)
            scratch = ToolRegistry()
            conn = await connect_provider(provider, scratch)
            connected.append(conn)
            ext.closers.append(conn.close)
            ext.parts.append((f"--provider {spec}", scratch.list()))
        if connected:
            blocks.append(await context_prompt(connected))
    except BaseException:
        await ext.aclose()
        raise
    skillset = load_skills(skills, entry_points=plugins)
    if len(skillset):
        ext.parts.append(("skills", skill_tools(skillset)))
        ext.setups.append(lambda server: install_skill_prompts(server, skillset))
        blocks.append(skills_prompt(skillset))
    prompts = load_prompts() if plugins else []
    taken = {sk.name for sk in skillset}
    for p in [p for p in prompts if p.name in taken]:  # one name, one prompt: the skill keeps it
        log.warning("prompt_skipped", prompt=p.name, reason="a skill has the same name")
    prompts = [p for p in prompts if p.name not in taken]
    if prompts:
        ext.setups.append(lambda server: install_prompts(server, prompts))
    ext.instructions = "\n\n".join(b for b in blocks if b) or None
    return ext


__all__ = ["Extensions", "open_extensions"]
