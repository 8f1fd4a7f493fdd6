"""openfunctions.ui: a local web viewer of everything a data directory records.

Receipts (the execution journal), agent runs, workflow runs, work attempts,
MCP tasks and chat conversations, read lock-free through their owning
packages' readers; one run as a tree and a timeline; what needs a person
first (blocked runs and attempts, uncertain steps, with the exact
``resolve`` command); live updates as records are appended. Plain
HTML/CSS/JS served from this package (no CDN, no build step).

    openfunctions-mcp ui --data-dir DIR            # http://127.0.0.1:8766/

In code: ``await serve_ui(data_dir, port=0, ready=print)`` or
``create_ui_app(data_dir)`` (an ASGI app). docs/UI.md has the tour.
"""

from ._app import create_ui_app, serve_ui
from ._errors import UIConfigError, UIError

__all__ = ["UIConfigError", "UIError", "create_ui_app", "serve_ui"]
