"""Memory errors (each with a stable ``code``). Store errors pass through unchanged."""

from __future__ import annotations

from openfunctions.core import OpenFunctionsError


class MemoryLayerError(OpenFunctionsError):
    code = "memory_error"


class InvalidMemoryInput(MemoryLayerError):
    """A bad thread id, role, fact id, empty or oversized text: nothing was written."""

    code = "memory_invalid_input"


class FactNotFound(MemoryLayerError):
    code = "memory_fact_not_found"


class MemoryNotOpen(MemoryLayerError):
    code = "memory_not_open"


__all__ = ["FactNotFound", "InvalidMemoryInput", "MemoryLayerError", "MemoryNotOpen"]
