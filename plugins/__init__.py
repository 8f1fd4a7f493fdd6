"""openfunctions.plugins: entry-point groups for tools, context providers, skills and prompts.

:func:`list_plugins` (what is installed, from which distribution, whether it
loads), :func:`load_group`, :func:`resolve_provider` (``--provider vault:/path``),
:class:`Prompt` / :func:`load_prompts`. ``openfunctions-mcp plugins list``.
A broken plugin is reported and skipped, never fatal. See docs/EXTENDING.md.
"""

from ._plugins import (
    GROUPS,
    PROMPTS_GROUP,
    PROVIDERS_GROUP,
    SKILLS_GROUP,
    TOOLS_GROUP,
    Plugin,
    PluginError,
    Prompt,
    install_prompts,
    list_plugins,
    load_group,
    load_prompts,
    resolve_provider,
)

__all__ = [
    "GROUPS", "PROMPTS_GROUP", "PROVIDERS_GROUP", "SKILLS_GROUP", "TOOLS_GROUP", "Plugin", "PluginError", "Prompt",
    "install_prompts", "list_plugins", "load_group", "load_prompts", "resolve_provider",
]
