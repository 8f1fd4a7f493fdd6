"""Old public names kept for one release after a rename.

A package that renames a public function keeps the old name for one release:
not in ``__all__``, reachable through the package's module ``__getattr__``
(PEP 562), and every use (``pkg.old`` or ``from pkg import old``) warns with a
:class:`DeprecationWarning` naming the new one. The package lists its renames
in a module-level ``_RENAMED = {"old": "new"}`` table, which
tests/test_naming.py reads to check that each old name warns and returns the
very object the new name does. docs/API.md ("Naming") says which verb a name
takes.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def renamed(module: str, old: str, new: str) -> Any:
    """``module.new``, after warning that ``module.old`` is its deprecated name.

    Called from a module ``__getattr__``: ``stacklevel`` points the warning at
    the line that used the old name, not at this function.
    """
    warnings.warn(f"{module}.{old} is deprecated and will be removed in the next release: use {module}.{new}",
                  DeprecationWarning, stacklevel=3)
    return getattr(sys.modules[module], new)


def old_names(module: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) serving ``table``'s old names through :func:`renamed`.

    Use: ``__getattr__ = old_names(__name__, _RENAMED)`` under ``if not TYPE_CHECKING:``
    (a module ``__getattr__`` would make mypy read every misspelt import as ``Any``).
    """

    def __getattr__(name: str) -> Any:
        if name in table:
            return renamed(module, name, table[name])
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


__all__ = ["old_names", "renamed"]
