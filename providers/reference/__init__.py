"""openfunctions.providers.reference: context providers over local data, offline.

Each is loaded by a short name through the ``openfunctions.providers``
entry-point group (``vault:/path``, ``git:/path``, ``calendar:/path``,
``tasks:/path``; see :func:`openfunctions.plugins.resolve_provider`) or built
in Python:

- :class:`VaultProvider` — an Obsidian-style markdown vault (domains vault,
  knowledge, people, projects; 7 tools);
- :class:`GitProvider` — a git repository through the ``git`` command line
  (codebase; 5 tools);
- :class:`CalendarProvider` — ``.ics`` calendars (calendar; 3 tools);
- :class:`TasksProvider` — markdown task lists and todo.txt (tasks, projects;
  3 tools, two of them writes).

Every path a tool takes is confined to the configured root; outputs are bounded.
"""

from ._calendar import CalendarProvider, calendar_provider
from ._git import GitProvider, git_provider
from ._tasks import TasksProvider, tasks_provider
from ._vault import VaultProvider, vault_provider

__all__ = [
    "CalendarProvider", "GitProvider", "TasksProvider", "VaultProvider",
    "calendar_provider", "git_provider", "tasks_provider", "vault_provider",
]
