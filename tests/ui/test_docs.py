"""docs/UI.md: its python block runs, and the routes it lists are the app's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "UI.md"


def test_the_python_block_runs() -> None:
    [code] = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    out = subprocess.run([sys.executable, "-c", code + "\nprint(type(app).__name__)"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "RequestGuard", out.stderr


def test_the_api_table_names_every_route() -> None:
    from openfunctions.ui import create_ui_app

    app = create_ui_app(ROOT)
    routes = {r.path for r in app.app.routes}  # inside the RequestGuard
    text = DOC.read_text()
    for path in routes - {"/", "/app.js", "/app.css"}:
        assert f"`{path.split('/{')[0]}" in text or f"`POST {path}`" in text, path


def test_the_pages_never_hand_text_to_the_html_parser() -> None:
    """Record text reaches the DOM as text only: no HTML-parsing sink appears in the viewer's or the chat page's script."""
    for page in (ROOT / "ui" / "_static" / "app.js", ROOT / "chat" / "_page.html"):
        source = page.read_text()
        for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                     "DOMParser", "createContextualFragment", "srcdoc"):
            assert sink not in source, (page.name, sink)
        assert "textContent" in source
