"""bench/_chart.py: the SVG bar charts under docs/PERFORMANCE.md's tables."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from _chart import CHARTS, bar_chart  # noqa: E402

SVG = "{http://www.w3.org/2000/svg}"


def test_a_chart_is_plain_svg_with_a_pair_of_bars_per_row_scaled_per_row() -> None:
    svg = bar_chart("t <&>", [("<script>x</script>", 200.0, 100.0, "2.10x"), ("b", 5.0, 10.0, None)], unit="calls/s")
    root = ET.fromstring(svg)  # well-formed XML: labels are escaped, nothing else is needed to show it
    bars = [r for r in root.iter(f"{SVG}rect") if r.get("height") == "14"]
    assert [float(b.get("width")) for b in bars] == [400.0, 200.0, 200.0, 400.0]
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "t <&>" in texts and "2.10x" in texts and "0.50x" in texts  # the table's ratio, else ours / peer
    assert "<script>" not in svg


def test_the_published_charts_are_drawn_from_the_published_tables() -> None:
    before = {name: (ROOT / "docs" / "perf" / f"{spec[0]}.svg").read_text() for name, spec in CHARTS.items()}
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "charts.py")], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    for name, spec in CHARTS.items():
        assert (ROOT / "docs" / "perf" / f"{spec[0]}.svg").read_text() == before[name], name
        assert f"](perf/{spec[0]}.svg)" in (ROOT / "docs" / "PERFORMANCE.md").read_text()
