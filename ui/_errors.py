"""The viewer's errors (``openfunctions-mcp ui``).

| class | code |
|---|---|
| :class:`UIError` | ``ui_error`` |
| :class:`UIConfigError` | ``ui_config_invalid``: a non-loopback bind without a token, a port that cannot be bound, a missing data dir |

The HTTP answers' codes (``ui_not_found``, ``ui_bad_filter``, ``ui_too_many_watchers``) are in ``_app.py``.
"""

from __future__ import annotations

from openfunctions.core import OpenFunctionsError


class UIError(OpenFunctionsError):
    """Root of the viewer's errors."""

    code = "ui_error"


class UIConfigError(UIError):
    """The viewer cannot be served as asked; the message says why and what to do."""

    code = "ui_config_invalid"


__all__ = ["UIConfigError", "UIError"]
