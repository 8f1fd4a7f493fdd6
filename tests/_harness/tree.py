"""A copy of the source tree for a test that builds from it (``python -m build``), so that nothing is written
into the checkout while other tests read it.

Building in place writes into the checkout: setuptools rewrites ``openfunctions_mcp.egg-info/`` and
makes the sdist's tree, ``openfunctions_mcp-<version>/``, at the top of the repository for a moment.
Under pytest-xdist another worker may be walking the tree right then (the docs hygiene scan, ruff over
``.``, the import graph) and read half a file or one that vanishes. The copy leaves out what no build reads
(version control, virtualenvs, caches, build outputs, the interop peers) and keeps everything else, so the
sdist holds what an in-place build would put in it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_LEFT_OUT = shutil.ignore_patterns(
    ".git", ".venv", "venv", ".interop", "node_modules", "build", "dist", "*.egg-info", "__pycache__",
    ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", "_out",
)


def copy_source_tree(dest: Path, source: Path = REPO) -> Path:
    """Copy the checkout at ``source`` to ``dest`` (which must not exist) without what no build reads;
    return ``dest``."""
    shutil.copytree(source, dest, ignore=_LEFT_OUT, symlinks=True)
    return dest


__all__ = ["copy_source_tree"]
